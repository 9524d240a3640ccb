"""`copilot-opt render`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from copilot_cli import prompts
from copilot_cli.cli.common import JsonOpt, option, print_json
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import ALLOW_DOWNLOAD, TokenizerOpt, from_options
from copilot_cli.core import lazy
from copilot_cli.core.inputs import read_json_object
from copilot_cli.prompts.options import RenderOptions

context_requests = lazy.module("copilot_cli.context.requests")


@handle_errors
def render_command(
    bundle: Path = from_options(RenderOptions, "bundle", default=..., argument=True),
    name: str = from_options(RenderOptions, "name", default=..., argument=True),
    inputs: str = from_options(RenderOptions, "inputs", "-i", default=...),
    context: Annotated[
        list[Path] | None,
        option("--context", help="A result of copilot-opt context (its snippets or overview)."),
    ] = None,
    tokenizer: TokenizerOpt = "",
    allow_download: bool = ALLOW_DOWNLOAD,
    json_output: JsonOpt = False,
) -> None:
    """Render one template of a bundle with the given inputs."""
    values = read_json_object(inputs, "inputs file")
    for path in context or []:
        values.update(context_requests.context_inputs(path))
    options = RenderOptions(
        bundle=bundle,
        name=name,
        inputs=values,
        count_tokens=json_output,
        tokenizer=tokenizer,
        allow_download=allow_download,
    )
    result = prompts.render_template(options)
    if json_output:
        print_json(result.to_dict())
    else:
        sys.stdout.write(result.text)
