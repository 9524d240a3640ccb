"""`copilot-opt prune`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from copilot_cli import prune
from copilot_cli.cli.common import JsonOpt, note, option, print_json
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import ALLOW_DOWNLOAD, DEVICE, DTYPE, MODEL, from_options, model_spec
from copilot_cli.core.artifacts import write_bytes
from copilot_cli.core.inputs import read_text
from copilot_cli.core.outputs import claim_file, remember_written
from copilot_cli.prune.options import PruneOptions


@handle_errors
def prune_command(
    input_path: Annotated[str, typer.Argument(metavar="INPUT", help="Text file, or - for stdin.")],
    model: str = MODEL,
    rate: float | None = from_options(PruneOptions, "rate"),
    target_tokens: int | None = from_options(PruneOptions, "target_tokens"),
    threshold: float | None = from_options(PruneOptions, "threshold"),
    method: str = from_options(PruneOptions, "method"),
    protect: list[str] | None = from_options(PruneOptions, "protect", default=None),
    language: str | None = from_options(PruneOptions, "language"),
    out: Annotated[Path | None, option("--out", "-o", help="Write the result here.")] = None,
    dtype: str = DTYPE,
    device: str = DEVICE,
    allow_download: bool = ALLOW_DOWNLOAD,
    json_output: JsonOpt = False,
) -> None:
    """Compress a prompt or context file, keeping protected spans and code validity."""
    inputs = () if input_path == "-" else (Path(input_path),)
    claim_file(out, "out", label="pruned text", inputs=inputs)
    options = PruneOptions(
        text=read_text(input_path, "input"),
        rate=rate,
        target_tokens=target_tokens,
        threshold=threshold,
        method=method,
        protect=tuple(protect or ()),
        language=language or (prune.language_for_path(input_path) if input_path != "-" else None),
        model=model_spec(model, device, dtype, allow_download),
    )
    result = prune.prune_text(options)
    if out is not None:
        write_bytes(out, result.text.encode("utf-8"))
        remember_written(out)
    if result.requested_rate and result.achieved_rate > result.requested_rate * 1.05:
        note(
            f"note: kept {result.achieved_rate:.1%} of the tokens, not {result.requested_rate:.1%}:"
            " the protected spans (names, numbers, negations, line breaks, --protect) are kept"
        )
    if json_output:
        print_json(result.to_dict())
        return
    if out is None:
        sys.stdout.write(result.text)
    parses = "" if result.parses is None else f", parses: {'yes' if result.parses else 'NO'}"
    tail = f", last {result.verbatim_tail} characters kept as is" if result.verbatim_tail else ""
    note(
        f"{result.original_tokens} -> {result.kept_tokens} tokens "
        f"({result.achieved_rate:.1%}, {result.mode}){parses}{tail}"
    )
