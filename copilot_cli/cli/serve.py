"""`copilot-opt serve`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from copilot_cli.cli.common import option
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import ModelOpt


@handle_errors
def serve_command(
    ctx: typer.Context,
    kv_dir: Annotated[Path, typer.Argument(help="A folder written by prefill-kv.")] = Path(
        "build/kv"
    ),
    model: ModelOpt = "",
    host: Annotated[str, option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, option("--port", help="Port to listen on.")] = 8000,
    max_bytes: Annotated[
        int, option("--max-bytes", help="Host memory for loaded prefixes (bytes).")
    ] = 2 << 30,
    no_preload: Annotated[
        bool, option("--no-preload", help="Load prefixes on first use, not at start.")
    ] = False,
    plan: Annotated[
        Path | None, option("--plan", help="A warm plan: what to load at start and after.")
    ] = None,
    engine: Annotated[
        str,
        option(
            "--engine",
            help="vllm, or llama.cpp (a slot folder and --model FILE.gguf); with --bundle also "
            "transformers.",
        ),
    ] = "vllm",
    print_command: Annotated[
        bool, option("--print-command", help="Print the vllm serve line; start nothing.")
    ] = False,
    bundle: Annotated[
        Path | None, option("--bundle", help="Serve the editors' endpoint with this bundle.")
    ] = None,
    template: Annotated[str, option("--template", help="Its template.")] = "code-completion",
    chunks: Annotated[Path | None, option("--chunks", help="The repository's chunks.")] = None,
    registry: Annotated[Path | None, option("--registry", help="Their registry.")] = None,
    budget: Annotated[int, option("--budget", help="Context tokens per request.")] = 1024,
) -> None:
    """Serve prepared KV: the editors' endpoint (/infill, /v1/completions) with --bundle, else
    vLLM's OpenAI server with the prefix connector (args after -- go to vLLM)."""
    from copilot_cli.serving.server import ServeOptions, check, printable, serve

    if bundle is not None:
        from copilot_cli.serving.endpoint import serve_endpoint

        return serve_endpoint(locals())
    options = ServeOptions(
        kv_dir=kv_dir,
        model=model,
        host=host,
        port=port,
        max_bytes=max_bytes,
        preload=not no_preload,
        plan=plan,
        extra_args=tuple(ctx.args),
        engine=engine,
    )
    if engine != "vllm":
        from copilot_cli.serving.engines import serve_llamacpp

        return serve_llamacpp(kv_dir, model, host, port)
    if print_command:
        model_dir, dtype = check(options)
        typer.echo(printable(options, model_dir, dtype))
        return
    code = serve(options)
    if code:
        raise typer.Exit(code)
