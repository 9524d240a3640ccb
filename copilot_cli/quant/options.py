"""Settings of quantize (no torch import: the CLI builds these)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from copilot_cli.core.modelspec import ModelSpec
from copilot_cli.core.options import coerce_paths, require, require_count, require_number, setting
from copilot_cli.core.outputs import check_output_shape
from copilot_cli.paths import DEFAULT_CORPUS, DEFAULT_PROMPTS

SUPPORTED_BITS = (8, 4)
SUPPORTED_GROUPS = (32, 64, 128)


@dataclass(frozen=True)
class QuantizeOptions:
    """Settings of quantize.

    Attributes:
        out: output folder (embeddings.safetensors and report.json).
        bits: 8 (per-row scales) or 4 (group-wise scales).
        group_size: columns per scale for 4-bit (32, 64 or 128).
        keep_fp16: keep this many most frequent rows in FP16 (exclusive with keep_coverage).
        keep_coverage: keep the most frequent rows that together cover this share of corpus
            tokens.
        corpus: files or folders whose token frequencies decide the kept rows.
        include_lm_head: quantize the output projection too (once, when tied).
        prompts: JSONL prompts for the logit-fidelity check (None skips it).
        model: the model to load when none is handed in.
    """

    out: Path = setting(Path("build/quant"), yaml=False)
    bits: Literal[8, 4] = 8
    group_size: Literal[32, 64, 128] = 32
    keep_fp16: int | None = None
    keep_coverage: float | None = None
    corpus: tuple[Path, ...] = DEFAULT_CORPUS
    include_lm_head: bool = False
    prompts: Path | None = DEFAULT_PROMPTS
    model: ModelSpec = setting(default_factory=ModelSpec, yaml=False)

    def __post_init__(self) -> None:
        coerce_paths(self)
        require(
            self.keep_fp16 is None or self.keep_coverage is None,
            "keep_coverage",
            "give keep_fp16 or keep_coverage, not both",
        )
        if self.keep_fp16 is not None:
            require_count(self.keep_fp16, "keep_fp16")
        if self.keep_coverage is not None:
            require_number(self.keep_coverage, "keep_coverage", low=0.0, high=1.0, low_open=True)
        require(
            self.bits in SUPPORTED_BITS,
            "bits",
            f"{self.bits} is not supported; choose one of {', '.join(map(str, SUPPORTED_BITS))}",
        )
        require(
            self.bits == 8 or self.group_size in SUPPORTED_GROUPS,
            "group_size",
            f"{self.group_size} is not supported; choose one of "
            f"{', '.join(map(str, SUPPORTED_GROUPS))}",
        )
        check_output_shape(self.out, "out", folder=True)
        for path in self.corpus:
            require(path.exists(), "corpus", f"{path} does not exist")
        if self.prompts is not None:
            require(self.prompts.is_file(), "prompts", f"{self.prompts} does not exist")
