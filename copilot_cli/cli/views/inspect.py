"""An inspected artifact as tables; its problems as one stderr line each."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from copilot_cli.cli.common import cell, clip, key_value_table, stderr_console, stdout_console

_LISTS = {
    "prefixes": ("name", "tokens", "segments", "block_hashes", "origin"),
    "templates": ("name", "static_prefix_chars", "static_prefix_tokens"),
}


def show_inspection(inspection: Any) -> None:
    info = inspection.info
    rows = [("kind", inspection.kind)]
    rows += [(k, v) for k, v in info.items() if k not in _LISTS and k != "geometry"]
    verdict = "FAILED (bad files listed on stderr)" if inspection.problems else "yes"
    rows.append(("verified", verdict if inspection.verified else "no (--no-verify)"))
    stdout_console.print(key_value_table(inspection.path, rows))
    for key, columns in _LISTS.items():
        if info.get(key):
            table = Table(title=key, title_justify="left")
            for column in columns:
                table.add_column(column.replace("_", " "))
            for entry in info[key]:
                table.add_row(*(cell(entry.get(column)) for column in columns))
            stdout_console.print(table)
    for part in inspection.parts:
        show_inspection(part)


def show_problems(problems: list[Any]) -> None:
    for problem in problems:
        stderr_console.print(cell(f"bad: {problem.file}: {clip(problem.problem)}"), highlight=False)
