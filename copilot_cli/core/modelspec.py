"""Where a model comes from and how to place it (no torch import: the CLI builds these)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from copilot_cli.core import lazy
from copilot_cli.core.options import OptionError, setting
from copilot_cli.paths import SHIPPED_MODEL

torch = lazy.module("torch")

DTYPE_NAMES = ("float32", "float16", "bfloat16")
DEFAULT_DEVICE = "cpu"  # the one place: ModelSpec, every --device flag, copilot-opt.yaml


def default_model() -> str:
    """The model used when none is given: $COPILOT_OPT_MODEL, else the shipped tiny code model."""
    return os.environ.get("COPILOT_OPT_MODEL") or str(SHIPPED_MODEL)


@dataclass(frozen=True)
class ModelSpec:
    """Where a model comes from and how to place it.

    Attributes:
        name_or_path: a local folder or a Hugging Face hub id ("" = the default model).
        device: "cpu" (default), "cuda", "cuda:N" or "mps".
        dtype: "auto" (as saved), "float32", "float16" or "bfloat16".
        allow_download: fetch from the hub when not cached locally (off by default).
        tokenizer: tokenizer folder or hub id when it differs from the model's.
    """

    name_or_path: str = setting(
        "", help="Model folder or hub id (default: the shipped tiny code model).", flag="--model"
    )
    device: str = setting(DEFAULT_DEVICE, help="cpu, cuda, cuda:N or mps.")
    dtype: str = setting("auto", help="auto (as saved), float32, float16, bfloat16.")
    allow_download: bool = setting(
        False, help="Fetch a hub model that is not cached (offline otherwise)."
    )
    tokenizer: str | None = None

    def __post_init__(self) -> None:
        if not self.name_or_path:
            object.__setattr__(self, "name_or_path", default_model())
        if self.dtype != "auto" and self.dtype not in DTYPE_NAMES:
            raise OptionError(
                "dtype", f"unknown dtype {self.dtype!r}; choose auto, {', '.join(DTYPE_NAMES)}"
            )
        if self.device != "cpu":  # every machine has one; asking torch costs its import
            check_device(self.device)


def check_device(device: str) -> Any:
    """Parse a device string, refusing one this machine does not have (imports torch)."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise OptionError("device", f"unknown device {device!r}") from exc
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise OptionError(
            "device",
            f"CUDA is not available here (torch {torch.__version__}); use --device cpu or "
            "install a CUDA build of torch (see README)",
        )
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise OptionError("device", "MPS is not available here")
    return parsed
