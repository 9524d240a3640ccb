"""Settings of quantize (no torch import: the CLI builds these)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from copilot_cli.core.gguf import gguf_file
from copilot_cli.core.modelspec import ModelSpec
from copilot_cli.core.options import coerce_paths, require, require_count, require_number, setting
from copilot_cli.core.outputs import check_output_shape
from copilot_cli.paths import DEFAULT_CORPUS, DEFAULT_PROMPTS

SUPPORTED_BITS = (8, 4)
SUPPORTED_GROUPS = (32, 64, 128)
EXPORTS = ("gguf", "compressed-tensors")


@dataclass(frozen=True)
class QuantizeOptions:
    """Settings of quantize.

    Attributes:
        out: output folder (embeddings.safetensors and report.json).
        bits: 8 (per-row scales) or 4 (group-wise scales).
        group_size: columns per scale for 4-bit, and for 8-bit with int8_scales "group"
            (32, 64 or 128).
        int8_scales: INT8's scales: one per row ("row") or one per group of group_size
            columns ("group"; with 32: exactly llama.cpp's Q8_0 blocks, 8.5 bits a value).
        keep_fp16: keep this many most frequent rows in FP16 (exclusive with keep_coverage).
        keep_coverage: keep the most frequent rows that together cover this share of corpus
            tokens.
        corpus: files or folders whose token frequencies decide the kept rows.
        include_lm_head: quantize the output projection too (once, when tied).
        prompts: JSONL prompts for the logit-fidelity check (None skips it).
        export: also write the table in engines' formats: `gguf` (OUT/model.gguf, Q8_0 for
            INT8, Q4_0 for INT4 groups of 32) and/or `compressed-tensors`
            (OUT/compressed-tensors/, a checkpoint transformers and vLLM load).
        gguf: the GGUF the gguf export starts from when the model is a transformers folder
            (the same model converted by llama.cpp); a GGUF model is its own.
        model: the model to load when none is handed in.
    """

    out: Path = setting(Path("build/quant"), yaml=False, help="Output folder.")
    bits: Literal[8, 4] = setting(8, help="8 (per-row scales) or 4 (group-wise).")
    group_size: Literal[32, 64, 128] = setting(32, help="Columns per grouped scale.")
    int8_scales: Literal["row", "group"] = setting(
        "row", help="row or group (INT8: one scale per --group-size)."
    )
    keep_fp16: int | None = setting(None, help="Keep the N most frequent rows in FP16.")
    keep_coverage: float | None = setting(
        None, help="Keep the rows covering this share of corpus tokens."
    )
    corpus: tuple[Path, ...] = setting(
        DEFAULT_CORPUS,
        help=(
            "File or folder for token frequencies (repeatable; default: sample_data/repo "
            "and templates/)."
        ),
    )
    include_lm_head: bool = setting(False, help="Quantize the output projection too.")
    prompts: Path | None = setting(
        DEFAULT_PROMPTS, help="JSONL prompts for the logit-fidelity check."
    )
    export: tuple[str, ...] = setting(
        (), help="Also write gguf and/or compressed-tensors (repeatable)."
    )
    gguf: Path | None = setting(None, help="The GGUF a gguf export starts from (a folder model).")
    model: ModelSpec = setting(default_factory=ModelSpec, yaml=False)

    @property
    def grouped(self) -> bool:
        """One scale per group of group_size columns (every INT4 table; INT8 when asked)."""
        return self.bits == 4 or self.int8_scales == "group"

    @property
    def scheme(self) -> str:
        if self.bits == 8 and not self.grouped:
            return "int8-per-row"
        return f"int{self.bits}-group{self.group_size}"

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
        require(self.int8_scales in ("row", "group"), "int8_scales", "use row or group")
        require(
            (self.bits == 8 and self.int8_scales == "row") or self.group_size in SUPPORTED_GROUPS,
            "group_size",
            f"{self.group_size} is not supported; choose one of "
            f"{', '.join(map(str, SUPPORTED_GROUPS))}",
        )
        check_output_shape(self.out, "out", folder=True)
        object.__setattr__(self, "export", tuple(self.export))
        for fmt in self.export:
            require(fmt in EXPORTS, "export", f"{fmt!r} is not one of {', '.join(EXPORTS)}")
        require(len(set(self.export)) == len(self.export), "export", "a format is named twice")
        require(
            "gguf" not in self.export or self.grouped is False or self.group_size == 32,
            "group_size",
            f"--export gguf writes Q8_0/Q4_0 blocks of 32 values: groups of {self.group_size} "
            "cannot be",
        )
        require(self.gguf is None or "gguf" in self.export, "gguf", "give it with --export gguf")
        require(
            "gguf" not in self.export
            or self.gguf is not None
            or gguf_file(str(self.model.name_or_path)) is not None,
            "export",
            "gguf needs a GGUF to start from: --model X.gguf, or --gguf BASE.gguf beside a "
            "transformers folder (convert it with llama.cpp's convert_hf_to_gguf.py)",
        )
        require(self.gguf is None or self.gguf.is_file(), "gguf", f"{self.gguf} is not a file")
        for path in self.corpus:
            require(path.exists(), "corpus", f"{path} does not exist")
        if self.prompts is not None:
            require(self.prompts.is_file(), "prompts", f"{self.prompts} does not exist")
