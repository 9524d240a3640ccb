"""The regress result as tables: variants, worst positions, failures, timing."""

from __future__ import annotations

from rich.table import Table

from copilot_cli.cli.common import cell, note, stderr_console, stdout_console, warn
from copilot_cli.regress.reports import UNCHECKED_BASELINE, summary_line
from copilot_cli.regress.results import RegressResult


def show(result: RegressResult) -> None:
    table = Table(title="regress", title_justify="left")
    if result.variants:
        columns = ["variant", "positions", *summary_line(result.variants[0].summary)]
        for column in [*columns, "greedy", "result"]:
            table.add_column(column)
    for v in result.variants:
        gen = v.generation
        greedy = (
            f"{gen.exact_match:.0%} exact, BLEU {gen.bleu4:.3f}, Lev {gen.levenshtein:.3f}"
            if gen
            else "-"
        )
        table.add_row(
            cell(v.name),
            str(v.summary.positions),
            *summary_line(v.summary).values(),
            greedy,
            "pass" if v.passed else "[red]FAIL[/]",
        )
    stdout_console.print(table)
    worst = Table(title="worst positions", title_justify="left")
    for column in ("variant", "prompt", "pos", "KL", "context", "base → variant"):
        worst.add_column(column)
    for v in result.variants:
        for w in v.worst[:5]:
            worst.add_row(
                cell(v.name),
                cell(w.case),
                str(w.position),
                f"{w.kl:.3g}",
                cell(repr(w.context[-40:])),
                cell(f"{w.base_top!r} → {w.variant_top!r}"),
            )
    stdout_console.print(worst)
    for v in result.variants:
        if v.failures:
            stderr_console.print(f"[red]{v.name}[/]: ", end="", highlight=False, markup=True)
            note("; ".join(v.failures))
    for name, why in result.thresholds.lax().items():
        warn(f"lax threshold, allowed explicitly: {name} {why}")
    if result.provenance.unchecked_baseline:
        warn(UNCHECKED_BASELINE)
    t = result.timing
    saved = f"; baseline saved to {result.baseline_saved}" if result.baseline_saved else ""
    note(
        f"forward {t.forward_seconds}s, metrics {t.metric_seconds}s "
        f"({t.metric_share:.1%} of forward){saved}"
    )
