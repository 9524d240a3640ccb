"""`copilot-opt inspect`: what an artifact holds, every byte of it verified."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from copilot_cli import pipeline
from copilot_cli.cli.common import JsonOpt, option, print_json
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import ALLOW_DOWNLOAD, DEVICE, model_spec
from copilot_cli.core import lazy
from copilot_cli.core.errors import CheckFailed

view = lazy.module("copilot_cli.cli.views.inspect")


@handle_errors
def inspect_command(
    path: Annotated[
        Path,
        typer.Argument(
            help="A KV folder or segment, a bundle, quantized embeddings, a baseline, chunks, "
            "a registry, or a build folder (everything in it)."
        ),
    ],
    no_verify: Annotated[
        bool, option("--no-verify", help="Describe only; do not read every byte.")
    ] = False,
    model: Annotated[
        str | None,
        option("--model", "-m", help="Also check it was made for this model and tokenizer."),
    ] = None,
    device: str = DEVICE,
    allow_download: bool = ALLOW_DOWNLOAD,
    json_output: JsonOpt = False,
) -> None:
    """Show what an artifact holds; verify it (exit 1 listing every bad file)."""
    spec = None if model is None else model_spec(model, device, "auto", allow_download)
    inspection = pipeline.inspect_artifact(path, verify=not no_verify, model=spec)
    if json_output:
        print_json(inspection.to_dict())
    else:
        view.show_inspection(inspection)
    if not inspection.ok:
        view.show_problems(inspection.all_problems)
        bad = len({p.file for p in inspection.all_problems})
        raise CheckFailed(f"{path}: verification failed, {bad} bad file(s)")
