"""`copilot-opt context`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from copilot_cli import context
from copilot_cli.cli.common import JsonOpt, option, print_json
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import TokenizerOpt, from_options
from copilot_cli.cli.views.context import show_context, write_out
from copilot_cli.context.options import ContextOptions, OverviewOptions
from copilot_cli.core import lazy

answer = lazy.module("copilot_cli.context.requests")


@handle_errors
def context_command(
    chunks: Path = from_options(ContextOptions, "chunks", default=..., argument=True),
    registry: Path | None = from_options(ContextOptions, "registry"),
    file: str = from_options(ContextOptions, "file"),
    repo: Annotated[
        Path, option("--repo", help="The repository folder --file and batch files are read from.")
    ] = Path("."),
    cursor: str | None = from_options(ContextOptions, "cursor"),
    prefix_file: Annotated[
        Path | None, option("--prefix-file", help="The text before the cursor.")
    ] = None,
    suffix_file: Annotated[
        Path | None, option("--suffix-file", help="The text after the cursor.")
    ] = None,
    budget: int = from_options(ContextOptions, "budget"),
    snippet_format: str = from_options(ContextOptions, "format"),
    unit: str = from_options(ContextOptions, "unit"),
    out: Annotated[Path | None, option("--out", "-o", help="Write the result here.")] = None,
    bundle: Annotated[
        Path | None, option("--bundle", help="A compiled bundle: render --template with it.")
    ] = None,
    template: Annotated[
        str | None, option("--template", help="The template the context is rendered into.")
    ] = None,
    requests: Annotated[
        Path | None, option("--requests", help="JSONL of requests: JSONL of results out.")
    ] = None,
    static: Annotated[
        bool, option("--static", help="Write the repository overview instead.")
    ] = False,
    top: int = from_options(OverviewOptions, "top"),
    tokenizer: TokenizerOpt = "",
    json_output: JsonOpt = False,
) -> None:
    """Choose repository context for a request (file + cursor), packed into a token budget."""
    session = context.open_session(chunks, registry, tokenizer_name=tokenizer or None)
    rendering, text = answer.Rendering.of(bundle, template), None
    if static:
        options = OverviewOptions(chunks, registry, top=top, budget=budget)
        result = answer.run_static(session, options, rendering)
        text = result.prefix if result.template else result.text
    else:
        kept = {"budget": budget, "format": snippet_format, "unit": unit, "prefix": ""}
        base = ContextOptions(chunks, registry, **kept)
        if requests is not None:
            result = answer.run_batch(session, base, requests, repo, rendering)
        else:
            request = answer.ContextRequest.from_flags(file, cursor, prefix_file, suffix_file)
            result = answer.run_one(session, base, request, repo, rendering)
    inputs = [p for p in (chunks, registry, requests, prefix_file, suffix_file) if p]
    batch = requests is not None
    if json_output and out is None:  # stdout holds one document (JSON Lines for a batch)
        write_out(None, result, None, batch, inputs)
        return
    write_out(out, result, text, batch, inputs)
    if json_output:
        print_json(result.to_dict() if not batch else {"requests": len(result)})
    else:
        show_context(result, out, batch)
