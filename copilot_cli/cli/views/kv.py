"""prefill-kv and inspect results as tables."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from copilot_cli.cli.common import cell, note, stdout_console


def show_prefill(result: Any) -> None:
    table = Table(title=cell(f"KV {result.out}"), title_justify="left")
    for column in ("prefix", "tokens", "segments", "blocks", "origin"):
        table.add_column(column)
    for p in result.prefixes:
        table.add_row(
            cell(p.name), str(p.tokens), str(p.segments), str(p.block_hashes), cell(p.origin)
        )
    stdout_console.print(table)
    note(
        f"{result.sum_prefix_tokens} prefix tokens stored as {result.distinct_tokens} distinct "
        f"({result.computed_tokens} computed, {result.reused_tokens} reused), "
        f"{result.bytes_on_disk:,} bytes, {result.seconds:.2f}s"
    )
    if result.verify:
        checks = Table(title="verify", title_justify="left")
        for column in ("prefix", "max |Δlogit|", "tolerance", "greedy agreement", "ok"):
            checks.add_column(column)
        for r in result.verify:
            checks.add_row(
                cell(r.name),
                f"{r.max_abs_diff:.2e}",
                f"{r.tolerance:.0e}",
                f"{r.greedy_agreement:.1%}",
                "yes" if r.passed else "NO",
            )
        stdout_console.print(checks)
