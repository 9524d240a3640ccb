"""`copilot-opt warm-plan`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from copilot_cli.cli.common import JsonOpt, option, print_json
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.views.warm import show
from copilot_cli.warm import WarmPlanOptions, make_plan
from copilot_cli.warm.options import parse_bytes
from copilot_cli.warm.plan import write_plan


@handle_errors
def warm_plan_command(
    logs: Annotated[list[Path], typer.Argument(help="Request logs (JSONL, docs/formats.md).")],
    out: Annotated[Path, option("--out", "-o", help="The plan to write.")] = Path(
        "build/warm-plan.json"
    ),
    budget: Annotated[
        str | None,
        option("--budget", help="Bytes L0 + L1 may hold (e.g. 86MB, 1GiB; default 64 MiB)."),
    ] = None,
    kv: Annotated[Path | None, option("--kv", help="KV folder: prefix sizes.")] = None,
    chunks: Annotated[Path | None, option("--chunks", help="Chunks JSONL: chunk sizes.")] = None,
    predictor: Annotated[
        str,
        option(
            "--predictor",
            help="auto (best measured), frequency-recency, markov-1, markov-2 or gru.",
        ),
    ] = "auto",
    window: Annotated[float, option("--window", help="Seconds ahead to plan for.")] = 600.0,
    l0_share: Annotated[
        float,
        option("--l0-share", help="The most of the budget L0 may pin (the rest is evictable L1)."),
    ] = 0.5,
    json_output: JsonOpt = False,
) -> None:
    """Rank prefixes and chunks by predicted use and assign tiers within a memory budget."""

    options = WarmPlanOptions(
        logs=tuple(logs),
        out=out,
        **({"budget": parse_bytes(budget)} if budget is not None else {}),
        kv=kv,
        chunks=chunks,
        predictor=predictor,
        window=window,
        l0_share=l0_share,
    )
    plan = make_plan(options)
    write_plan(plan, out)
    if json_output:
        print_json({"out": str(out), **plan.to_dict(), "items": len(plan.items), "l2_bloom": None})
    else:
        show(plan, out)
