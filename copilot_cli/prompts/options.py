"""Settings of compile-templates and render (no torch import: the CLI builds these)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from copilot_cli.core.options import coerce_paths, require, require_count, setting
from copilot_cli.core.outputs import check_output_shape
from copilot_cli.paths import SHIPPED_TEMPLATES
from copilot_cli.prompts.limits import RenderLimits


@dataclass(frozen=True)
class CompileOptions:
    """Settings of compile-templates.

    Attributes:
        src: the template folder (templates at any depth, shared parts under `parts/`).
        out: the bundle folder to write.
        min_prefix_tokens: warn when a static prefix is shorter than this (with a tokenizer).
        limits: what one render may cost (output size, loop iterations, seconds); stored in
            the bundle, which renders within them.
        tokenizer: tokenizer or model folder for token counts and boundary checks ("" = the
            default model's).
        use_tokenizer: False compiles without one (no token counts, no boundary check).
    """

    src: Path = setting(
        SHIPPED_TEMPLATES, yaml=False, help="Template folder (default: the shipped templates)."
    )
    out: Path = setting(Path("build/templates"), yaml=False, help="Bundle folder to write.")
    min_prefix_tokens: int = setting(64, help="Warn below this prefix length.")
    limits: RenderLimits = setting(default_factory=RenderLimits)
    tokenizer: str = setting("", yaml=False)
    use_tokenizer: bool = setting(True, yaml=False)
    allow_download: bool = setting(False, yaml=False)

    def __post_init__(self) -> None:
        coerce_paths(self)
        require(self.src.exists(), "src", f"template folder {self.src} does not exist")
        require(self.src.is_dir(), "src", f"expected a template folder, {self.src} is a file")
        check_output_shape(self.out, "out", folder=True)
        require_count(self.min_prefix_tokens, "min_prefix_tokens", high=1 << 20)


@dataclass(frozen=True)
class RenderOptions:
    """Settings of render: one template of a bundle with given inputs.

    Attributes:
        bundle: the bundle folder.
        name: the template's name.
        inputs: the template's inputs (checked against its schema).
        count_tokens: also count the prefix, rest and total tokens (loads the tokenizer).
        tokenizer: tokenizer or model folder for the counts ("" = the default model's).
    """

    bundle: Path = setting(help="Bundle folder written by compile-templates.")
    name: str = setting(help="Template name.")
    inputs: Mapping[str, Any] = setting(
        default_factory=dict, help="JSON file with the inputs, or - for stdin."
    )
    count_tokens: bool = False
    tokenizer: str = ""
    allow_download: bool = False

    def __post_init__(self) -> None:
        coerce_paths(self)
        require(self.bundle.is_dir(), "bundle", f"{self.bundle} is not a bundle folder")
