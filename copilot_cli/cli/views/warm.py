"""A warm plan as tables: the predictors measured, the tiers."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from copilot_cli.cli.common import cell, note, stdout_console


def show(plan: Any, out: Any) -> None:
    table = Table(
        title=cell(f"predictors on held-out time (window {plan.window:g} s)"), title_justify="left"
    )
    for column in ("predictor", "hit rate", "resident bytes", "windows", "uses"):
        table.add_column(column)
    for name, row in plan.evaluation.items():
        chosen = " (chosen)" if name == plan.predictor else ""
        table.add_row(
            cell(name + chosen),
            f"{row['hit_rate']:.1%}",
            f"{row['resident_bytes']:,}",
            str(row["windows"]),
            str(row["uses"]),
        )
    stdout_console.print(table)
    tiers = Table(title="tiers", title_justify="left")
    for column in ("tier", "prefixes", "chunks", "bytes (shared segments once)"):
        tiers.add_column(column)
    held = plan.bytes_of_tiers()
    for tier in ("L0", "L1", "L2"):
        items = [i for i in plan.items if i.tier == tier]
        tiers.add_row(
            tier,
            str(sum(i.kind == "prefix" for i in items)),
            str(sum(i.kind == "chunk" for i in items)),
            f"{held[tier]:,}",
        )
    stdout_console.print(tiers)
    fp = f"; L2 behind a Bloom filter (false positives {plan.fp_rate:.0%})" if plan.bloom else ""
    note(
        f"resident {plan.resident_bytes:,} of {plan.budget:,} bytes{fp}; "
        f"{plan.unknown_items} logged items of unknown size left out; plan: {out}"
    )
