"""`copilot-opt compile-templates`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from copilot_cli import prompts
from copilot_cli.cli.common import JsonOpt, option, print_json, warn
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import ALLOW_DOWNLOAD, TokenizerOpt, from_options
from copilot_cli.core import lazy
from copilot_cli.prompts.options import CompileOptions

view = lazy.module("copilot_cli.cli.views.templates")


@handle_errors
def compile_templates_command(
    src: Path | None = from_options(CompileOptions, "src", default=None, argument=True),
    out: Path = from_options(CompileOptions, "out", "-o"),
    tokenizer: TokenizerOpt = "",
    no_tokenizer: Annotated[
        bool, option("--no-tokenizer", help="Skip token counts and boundary checks.")
    ] = False,
    min_prefix_tokens: int = from_options(CompileOptions, "min_prefix_tokens"),
    allow_download: bool = ALLOW_DOWNLOAD,
    json_output: JsonOpt = False,
) -> None:
    """Validate and precompile prompt templates into a bundle with static prefixes."""
    options = CompileOptions(
        **({"src": src} if src is not None else {}),
        out=out,
        min_prefix_tokens=min_prefix_tokens,
        tokenizer=tokenizer,
        use_tokenizer=not no_tokenizer,
        allow_download=allow_download,
    )
    result = prompts.compile_templates(options)
    for message in result.warnings:
        warn(message)
    if json_output:
        print_json(result.to_dict())
    else:
        view.show(result)
