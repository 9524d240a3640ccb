"""`copilot-opt build`."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from copilot_cli import pipeline
from copilot_cli.cli.common import JsonOpt, cell, note, print_json, warn
from copilot_cli.cli.common import stdout_console as console
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import from_options
from copilot_cli.core import progress
from copilot_cli.pipeline.options import BuildOptions


@handle_errors
def build_command(
    config: Path = from_options(BuildOptions, "config", "-c"),
    out: Path = from_options(BuildOptions, "out", "-o"),
    force: bool = from_options(BuildOptions, "force"),
    dry_run: bool = from_options(BuildOptions, "dry_run"),
    json_output: JsonOpt = False,
) -> None:
    """Run compile-templates, prefill-kv, chunk, quantize and regress; skip what did not change."""
    options = BuildOptions(config=config, out=out, force=force, dry_run=dry_run)
    with progress.progress("building"):
        result = pipeline.run_build(options)
    for message in result.warnings:
        warn(message)
    if json_output:
        print_json(result.to_dict())
    else:
        table = Table(
            title=cell(("plan" if dry_run else "build") + f" {out}"), title_justify="left"
        )
        for column in ("step", "action", "why", "seconds"):
            table.add_column(column)
        for step in result.steps:
            seconds = f"{step.seconds:.2f}" if step.seconds else ""
            table.add_row(cell(step.name), step.action, cell(step.reason), seconds)
        console.print(table)
        if all(s.action in ("skip", "skipped") for s in result.steps):
            note("nothing to do: every step's inputs and outputs are unchanged")
        if result.verdict:
            note(f"regress verdict: {result.verdict}; manifest: {result.manifest}")
    result.raise_for_failures()
