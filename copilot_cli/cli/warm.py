"""`copilot-opt warm-plan`."""

from __future__ import annotations

from pathlib import Path

from copilot_cli.cli.common import JsonOpt, print_json
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import from_options
from copilot_cli.cli.views.warm import show
from copilot_cli.warm import WarmPlanOptions, make_plan
from copilot_cli.warm.options import parse_bytes
from copilot_cli.warm.plan import write_plan


@handle_errors
def warm_plan_command(
    logs: list[Path] = from_options(WarmPlanOptions, "logs", default=..., argument=True),
    out: Path = from_options(WarmPlanOptions, "out", "-o"),
    budget: str | None = from_options(WarmPlanOptions, "budget", default=None),
    kv: Path | None = from_options(WarmPlanOptions, "kv"),
    chunks: Path | None = from_options(WarmPlanOptions, "chunks"),
    predictor: str = from_options(WarmPlanOptions, "predictor"),
    window: float = from_options(WarmPlanOptions, "window"),
    l0_share: float = from_options(WarmPlanOptions, "l0_share"),
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
