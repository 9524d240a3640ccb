"""What quantize returns and writes as report.json: typed, with the JSON form derived."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class MemoryReport:
    fp16_bytes: int
    source_bytes: int
    quantized_bytes: int
    ratio_vs_fp16: float
    bits_per_weight: float
    lm_head_bytes: int


@dataclass(frozen=True)
class CorpusReport:
    files: int
    tokens: int
    fp16_token_share: float  # share of corpus tokens served by the FP16 rows


@dataclass(frozen=True)
class WorstRow:
    token_id: int
    token: str
    cosine: float
    sqnr_db: float


@dataclass(frozen=True)
class RowReport:
    sqnr_db_mean: float
    sqnr_db_min: float
    cosine_mean: float
    cosine_min: float
    worst_rows: list[WorstRow]


@dataclass(frozen=True)
class FidelityReport:
    """KL(base ‖ quantized) and same-top-1 over every position of the sample prompts."""

    prompts: int
    positions: int
    mean_kl: float
    kl_se: float
    max_kl: float
    same_top1: float
    ppl_ratio: float | None


@dataclass(frozen=True)
class ExportReport:
    """One export of the table in an engine's format (quantize --export)."""

    format: str  # "gguf" | "compressed-tensors"
    path: str  # inside the quantize folder
    tensors: dict[str, dict[str, Any]]  # name -> type_before/after, bytes_before/after
    kept_rows: int
    kept_rows_note: str
    output: str  # how the output projection is served
    file_bytes: int
    source: dict[str, Any] | None = None  # the GGUF it was made from: name, sha256, bytes


@dataclass(frozen=True)
class QuantizeReport:
    """report.json: the scheme, what it costs and how close it stays."""

    scheme: str
    bits: int
    group_size: int | None
    vocab_size: int
    hidden_size: int
    source_dtype: str
    corpus_hash: str
    kept_rows: int
    keep_policy: dict[str, float]
    lm_head: str  # "none" | "tied" | "separate"
    tied_embeddings: bool
    fingerprints: dict[str, str]
    memory: MemoryReport
    corpus: CorpusReport
    rows: RowReport
    logit_fidelity: FidelityReport | None = None
    exports: list[ExportReport] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if data["logit_fidelity"] is None:
            del data["logit_fidelity"]
        if not data["exports"]:  # reports without exports keep their bytes
            del data["exports"]
        return data


@dataclass
class QuantizeResult:
    out: Path
    report: QuantizeReport
    warnings: list[str] = field(default_factory=list)
