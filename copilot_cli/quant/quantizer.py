"""quantize: frequency-aware mixed-precision embedding tables, written with a report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from copilot_cli.core.artifacts import canonical_json, write_bytes
from copilot_cli.core.errors import InputError
from copilot_cli.core.models import LoadedModel
from copilot_cli.core.prompt_sets import load_prompts
from copilot_cli.paths import DEFAULT_CORPUS, DEFAULT_PROMPTS, REPO_ROOT  # noqa: F401
from copilot_cli.quant import format as qformat
from copilot_cli.quant.apply import quantized_modules
from copilot_cli.quant.frequency import count_tokens, select_kept
from copilot_cli.quant.report import logit_fidelity, row_errors
from copilot_cli.quant.scheme import check_bits, check_finite, quantize

REPORT = "report.json"


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
    """

    out: Path
    bits: int = 8
    group_size: int = 32
    keep_fp16: int | None = None
    keep_coverage: float | None = None
    corpus: tuple[Path, ...] = DEFAULT_CORPUS
    include_lm_head: bool = False
    prompts: Path | None = DEFAULT_PROMPTS

    def __post_init__(self) -> None:
        if self.keep_fp16 is not None and self.keep_coverage is not None:
            raise InputError("give --keep-fp16 or --keep-coverage, not both", where="--keep-fp16")
        if self.keep_fp16 is not None and self.keep_fp16 < 0:
            raise InputError("must be 0 or more", where="--keep-fp16")
        if self.keep_coverage is not None and not 0 < self.keep_coverage <= 1:
            raise InputError("must be in (0, 1]", where="--keep-coverage")
        check_bits(self.bits, self.group_size, cols=self.group_size)
        if self.out.exists() and not self.out.is_dir():
            raise InputError("output must be a folder", where=str(self.out))


@dataclass
class QuantizeResult:
    out: Path
    report: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def _special_ids(tokenizer: Any) -> list[int]:
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    ids |= {int(i) for i in (getattr(tokenizer, "added_tokens_decoder", {}) or {})}
    return sorted(ids)


def _table_bytes(stored: qformat.StoredTable) -> int:
    return stored.table.nbytes + stored.kept_rows.numel() * 2 + stored.kept_ids.numel() * 8


def _summarize_rows(sqnr: torch.Tensor, cosine: torch.Tensor, tokenizer: Any) -> dict[str, Any]:
    worst = torch.argsort(cosine, stable=True)[:10].tolist()
    return {
        "sqnr_db_mean": float(sqnr.mean()),
        "sqnr_db_min": float(sqnr.min()),
        "cosine_mean": float(cosine.mean()),
        "cosine_min": float(cosine.min()),
        "worst_rows": [
            {
                "token_id": i,
                "token": tokenizer.convert_ids_to_tokens(i),
                "cosine": float(cosine[i]),
                "sqnr_db": float(sqnr[i]),
            }
            for i in worst
        ],
    }


def quantize_embeddings(loaded: LoadedModel, options: QuantizeOptions) -> QuantizeResult:
    """Quantize the model's embedding table (and head), write it, and report errors.

    Raises:
        InputError: NaN/Inf rows (naming the token ids), unsupported bits or group size,
            a corpus path that does not exist.
    """
    model, tokenizer = loaded.model, loaded.tokenizer
    weight = model.get_input_embeddings().weight.detach().to("cpu")
    vocab, hidden = weight.shape
    check_bits(options.bits, options.group_size, hidden)
    check_finite(weight, "the embedding table")
    counts = count_tokens(list(options.corpus), tokenizer, vocab)
    keep_fp16, keep_coverage = options.keep_fp16, options.keep_coverage
    if keep_fp16 is None and keep_coverage is None:
        keep_fp16 = 0
    kept, share, warnings = select_kept(
        counts.counts,
        keep_fp16=keep_fp16,
        keep_coverage=keep_coverage,
        always=_special_ids(tokenizer),
    )
    kept_ids = torch.tensor(kept, dtype=torch.int64)
    tables = {
        "embed": qformat.StoredTable(
            quantize(weight, options.bits, options.group_size),
            kept_ids,
            weight[kept_ids].to(torch.float16),
        )
    }

    output = model.get_output_embeddings()
    out_weight = getattr(output, "weight", None)
    tied = (
        out_weight is not None
        and out_weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    )
    lm_head = "none"
    if options.include_lm_head and out_weight is not None:
        if tied:
            lm_head = "tied"
            warnings.append("input and output embeddings are tied: quantized once, used twice")
        else:
            head = out_weight.detach().to("cpu")
            check_finite(head, "the output projection")
            tables["lm_head"] = qformat.StoredTable(
                quantize(head, options.bits, options.group_size),
                kept_ids,
                head[kept_ids].to(torch.float16),
            )
            lm_head = "separate"
    metadata = {
        "scheme": "int8-per-row" if options.bits == 8 else f"int4-group{options.group_size}",
        "bits": options.bits,
        "group_size": None if options.bits == 8 else options.group_size,
        "vocab_size": vocab,
        "hidden_size": hidden,
        "source_dtype": str(weight.dtype).removeprefix("torch."),
        "model_fingerprint": loaded.model_fingerprint,
        "tokenizer_fingerprint": loaded.tokenizer_fingerprint,
        "corpus_hash": counts.corpus_hash,
        "kept_rows": len(kept),
        "keep_policy": (
            {"keep_fp16": keep_fp16} if keep_coverage is None else {"keep_coverage": keep_coverage}
        ),
        "lm_head": lm_head,
        "tied_embeddings": tied,
    }
    qformat.write(options.out / qformat.FILENAME, tables, metadata)

    module, head_module = quantized_modules(tables, {"lm_head": lm_head}, model)
    sqnr, cosine = row_errors(weight.float(), module)
    fp16_bytes = vocab * hidden * 2
    embed_bytes = _table_bytes(tables["embed"])
    report: dict[str, Any] = {
        **{
            k: v
            for k, v in metadata.items()
            if k not in ("model_fingerprint", "tokenizer_fingerprint")
        },
        "fingerprints": {
            "model": loaded.model_fingerprint,
            "tokenizer": loaded.tokenizer_fingerprint,
        },
        "memory": {
            "fp16_bytes": fp16_bytes,
            "source_bytes": weight.numel() * weight.element_size(),
            "quantized_bytes": embed_bytes,
            "ratio_vs_fp16": embed_bytes / fp16_bytes,
            "bits_per_weight": embed_bytes * 8 / (vocab * hidden),
            "lm_head_bytes": _table_bytes(tables["lm_head"]) if "lm_head" in tables else 0,
        },
        "corpus": {"files": counts.files, "tokens": counts.tokens, "fp16_token_share": share},
        "rows": _summarize_rows(sqnr, cosine, tokenizer),
    }
    if options.prompts is not None:
        prompts = load_prompts(options.prompts)
        report["logit_fidelity"] = logit_fidelity(model, tokenizer, prompts, module, head_module)
    write_bytes(options.out / REPORT, canonical_json(report).encode("utf-8"))
    return QuantizeResult(
        out=options.out, report=json.loads(canonical_json(report)), warnings=warnings
    )
