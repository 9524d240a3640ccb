"""Options shared by several commands (the model, output files), as Typer parameter types."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from copilot_cli.cli.common import option
from copilot_cli.core.modelspec import DEFAULT_DEVICE

__all__ = ["DEFAULT_DEVICE"]

ModelOpt = Annotated[
    str,
    option("--model", "-m", help="Model folder or hub id (default: the shipped tiny code model)."),
]
AllowLaxOpt = Annotated[
    bool,
    option(
        "--allow-lax-thresholds",
        help="Accept a KL threshold above 1 nat or a same-top-1 below 0.5 (named in every report).",
    ),
]
DeviceOpt = Annotated[str, option("--device", help="cpu, cuda, cuda:N or mps.")]
DtypeOpt = Annotated[str, option("--dtype", help="auto (as saved), float32, float16, bfloat16.")]
AllowDownloadOpt = Annotated[
    bool,
    option("--allow-download", help="Fetch a hub model that is not cached (offline otherwise)."),
]


def model_spec(model: str, device: str, dtype: str, allow_download: bool) -> Any:
    from copilot_cli.core.models import ModelSpec  # torch loads only when a command runs

    return ModelSpec(name_or_path=model, device=device, dtype=dtype, allow_download=allow_download)


TokenizerOpt = Annotated[
    str,
    option(
        "--tokenizer",
        "--model",
        "-m",
        help="Tokenizer (or model) folder for token counts and boundary checks "
        "(default: the shipped model's).",
    ),
]


def path_option(flag: str, help: str) -> Any:
    """An optional path option: `Annotated[Path | None, option(flag, help=help)]`."""
    return Annotated[Path | None, option(flag, help=help)]


def count_option(flag: str, help: str) -> Any:
    """An optional integer option: `Annotated[int | None, option(flag, help=help)]`."""
    return Annotated[int | None, option(flag, help=help)]


RayOpt = Annotated[
    str | None,
    option(
        "--ray",
        help="Run on Ray: local (a Ray instance here), auto (this machine's cluster) or a head "
        "address; same output as without (docs/scale.md).",
    ),
]
