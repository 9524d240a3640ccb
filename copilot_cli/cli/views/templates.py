"""compile-templates results as a table."""

from __future__ import annotations

from rich.table import Table

from copilot_cli.cli.common import cell, note, stdout_console
from copilot_cli.prompts import CompileResult


def show(result: CompileResult) -> None:
    table = Table(title=cell(f"bundle {result.out}"), title_justify="left")
    columns = ("template", "status", "prefix chars", "prefix tokens", "boundary cut", "variables")
    for column in columns:
        table.add_column(column)
    for t in result.templates:
        tokens = "-" if t.static_prefix_tokens is None else str(t.static_prefix_tokens)
        table.add_row(
            cell(t.name),
            t.status,
            str(t.static_prefix_chars),
            tokens,
            str(t.shortened_chars),
            cell(", ".join(t.variables)),
        )
    stdout_console.print(table)
    note(
        f"{len(result.templates)} templates, {len(result.parts)} parts, "
        f"{len(result.files_written)} files written"
    )
    for link, target in result.links.items():
        note(f"read through link {link} -> {target}")
