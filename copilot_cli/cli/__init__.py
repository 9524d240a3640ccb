"""The `copilot-opt` command line: a thin layer over the library, one module per command."""

from __future__ import annotations

from typing import Annotated

import typer

from copilot_cli import __version__
from copilot_cli.cli.build import build_command
from copilot_cli.cli.chunk import chunk_command
from copilot_cli.cli.common import check_environment, option, set_debug
from copilot_cli.cli.context import context_command
from copilot_cli.cli.entry import run
from copilot_cli.cli.inspect import inspect_command
from copilot_cli.cli.kv import prefill_kv_command
from copilot_cli.cli.model_info import model_info
from copilot_cli.cli.prune import prune_command
from copilot_cli.cli.quant import quantize_command
from copilot_cli.cli.regress import regress_command
from copilot_cli.cli.render import render_command
from copilot_cli.cli.serve import serve_command
from copilot_cli.cli.templates import compile_templates_command
from copilot_cli.cli.usage import OneLineErrors
from copilot_cli.cli.warm import warm_plan_command
from copilot_cli.core import progress

app = typer.Typer(
    name="copilot-opt",
    help="Prepare prompts, KV caches, embeddings and repository context for a self-hosted "
    "code assistant, offline, and prove in CI that nothing that matters changed.",
    no_args_is_help=True,
    cls=OneLineErrors,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"copilot-opt {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
    debug: Annotated[bool, option("--debug", help="Show tracebacks for errors.")] = False,
    quiet: Annotated[bool, option("--quiet", "-q", help="No progress bars.")] = False,
) -> None:
    set_debug(debug)
    progress.set_quiet(quiet)
    check_environment()


app.command("model-info")(model_info)
app.command("compile-templates")(compile_templates_command)
app.command("render")(render_command)
app.command("prefill-kv")(prefill_kv_command)
app.command("inspect")(inspect_command)
app.command("quantize")(quantize_command)
app.command("chunk")(chunk_command)
app.command("prune")(prune_command)
app.command("context")(context_command)
app.command("regress")(regress_command)
app.command("build")(build_command)
app.command("serve", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(
    serve_command
)
app.command("warm-plan")(warm_plan_command)


def main() -> None:
    """The console script (`copilot_cli.cli:main`)."""
    run(app)
