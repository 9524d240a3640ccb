"""`copilot-opt serve`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from copilot_cli.cli.common import option
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import MODEL, from_options
from copilot_cli.core import lazy
from copilot_cli.serving.options import EndpointOptions, ServeOptions

server = lazy.module("copilot_cli.serving.server")
endpoint = lazy.module("copilot_cli.serving.endpoint")
engines = lazy.module("copilot_cli.serving.engines")


@handle_errors
def serve_command(
    ctx: typer.Context,
    kv_dir: Path = from_options(ServeOptions, "kv_dir", argument=True),
    model: str = MODEL,
    host: str = from_options(ServeOptions, "host"),
    port: int | None = from_options(ServeOptions, "port", default=None),
    max_bytes: int = from_options(ServeOptions, "max_bytes"),
    no_preload: bool = from_options(ServeOptions, "preload"),
    plan: Path | None = from_options(ServeOptions, "plan"),
    engine: str = from_options(ServeOptions, "engine"),
    print_command: Annotated[
        bool, option("--print-command", help="Print the vllm serve line; start nothing.")
    ] = False,
    bundle: Path | None = from_options(EndpointOptions, "bundle", default=None),
    template: str = from_options(EndpointOptions, "template"),
    chunks: Path | None = from_options(EndpointOptions, "chunks", default=None),
    registry: Path | None = from_options(EndpointOptions, "registry"),
    budget: int = from_options(EndpointOptions, "budget"),
) -> None:
    """Serve prepared KV: the editors' endpoint (/infill, /v1/completions) with --bundle, else
    vLLM's OpenAI server with the prefix connector (args after -- go to vLLM)."""
    if bundle is not None:
        return endpoint.serve_endpoint(locals())
    options = ServeOptions(
        kv_dir=kv_dir,
        model=model,
        host=host,
        port=ServeOptions.port if port is None else port,
        max_bytes=max_bytes,
        preload=not no_preload,
        plan=plan,
        extra_args=tuple(ctx.args),
        engine=engine,
    )
    if engine != "vllm":
        return engines.serve_llamacpp(kv_dir, model, host, options.port)
    if print_command:
        model_dir, dtype = server.check(options)
        typer.echo(server.printable(options, model_dir, dtype))
        return
    code = server.serve(options)
    if code:
        raise typer.Exit(code)
