"""quantize: frequency-aware mixed-precision embedding tables, written with a report."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from copilot_cli.core import progress
from copilot_cli.core.artifacts import (
    FINGERPRINT_SCHEME,
    canonical_json,
    write_bytes,
)
from copilot_cli.core.locks import output_lock
from copilot_cli.core.models import LoadedModel, load_model
from copilot_cli.core.outputs import claim_folder, replaced_folder
from copilot_cli.core.prompt_sets import load_prompts
from copilot_cli.quant import format as qformat
from copilot_cli.quant.apply import quantized_modules
from copilot_cli.quant.exports import CT_FOLDER, GGUF_NAME, source_gguf, write_exports
from copilot_cli.quant.frequency import count_tokens, select_kept
from copilot_cli.quant.options import QuantizeOptions
from copilot_cli.quant.report import logit_fidelity, row_errors
from copilot_cli.quant.results import (
    CorpusReport,
    MemoryReport,
    QuantizeReport,
    QuantizeResult,
    RowReport,
    WorstRow,
)
from copilot_cli.quant.scheme import check_bits, check_finite, quantize

REPORT = "report.json"
# what a quantize folder holds; anything else is refused
OWNED = (qformat.FILENAME, REPORT, GGUF_NAME, CT_FOLDER)
CLAIM = {
    "fmt": qformat.FORMAT,
    "manifest": qformat.FILENAME,
    "label": "quantized-embeddings folder",
    "owned": OWNED,
}


def _special_ids(tokenizer: Any) -> list[int]:
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    ids |= {int(i) for i in (getattr(tokenizer, "added_tokens_decoder", {}) or {})}
    return sorted(ids)


def _table_bytes(stored: qformat.StoredTable) -> int:
    return stored.table.nbytes + stored.kept_rows.numel() * 2 + stored.kept_ids.numel() * 8


def _summarize_rows(sqnr: torch.Tensor, cosine: torch.Tensor, tokenizer: Any) -> RowReport:
    worst = torch.argsort(cosine, stable=True)[:10].tolist()
    return RowReport(
        sqnr_db_mean=float(sqnr.mean()),
        sqnr_db_min=float(sqnr.min()),
        cosine_mean=float(cosine.mean()),
        cosine_min=float(cosine.min()),
        worst_rows=[
            WorstRow(
                token_id=i,
                token=_token_text(tokenizer, i),
                cosine=float(cosine[i]),
                sqnr_db=float(sqnr[i]),
            )
            for i in worst
        ],
    )


def _token_text(tokenizer: Any, token_id: int) -> str:
    """The token's text, or `<no token>` for a row past the tokenizer (padding rows)."""
    text = tokenizer.convert_ids_to_tokens(token_id) if token_id < len(tokenizer) else None
    return text if isinstance(text, str) else "<no token>"


def quantize_embeddings(
    options: QuantizeOptions, loaded: LoadedModel | None = None
) -> QuantizeResult:
    """Quantize the model's embedding table (and head), write it, and report errors.
    Loads `options.model` when no model is handed in.

    Raises:
        InputError / OptionError: NaN/Inf rows (naming the token ids), unsupported bits or
            group size, a corpus with no usable text.
    """
    claim_folder(options.out, "out", **CLAIM)  # before any work, not after it
    with output_lock(options.out, "quantize", folder=False):  # a second run stops at once
        return _quantize(options, loaded)


def _quantize(options: QuantizeOptions, loaded: LoadedModel | None) -> QuantizeResult:
    if loaded is None:
        with progress.progress("loading model"):
            loaded = load_model(options.model)
    model, tokenizer = loaded.model, loaded.tokenizer
    weight = model.get_input_embeddings().weight.detach().to("cpu")
    vocab, hidden = weight.shape
    check_bits(options.bits, options.group_size, hidden, grouped=options.grouped)
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
    warnings = counts.notes() + warnings
    tables, lm_head, tied = _tables(model, weight, torch.tensor(kept, dtype=torch.int64), options)
    if lm_head == "tied":
        warnings.append("input and output embeddings are tied: quantized once, used twice")
    policy = {"keep_fp16": keep_fp16} if keep_coverage is None else {"keep_coverage": keep_coverage}
    metadata = {
        "scheme": options.scheme,
        "bits": options.bits,
        "group_size": options.group_size if options.grouped else None,
        "vocab_size": vocab,
        "hidden_size": hidden,
        "source_dtype": str(weight.dtype).removeprefix("torch."),
        "model_fingerprint": loaded.model_fingerprint,
        "tokenizer_fingerprint": loaded.tokenizer_fingerprint,
        "fingerprint_scheme": FINGERPRINT_SCHEME,
        "corpus_hash": counts.corpus_hash,
        "kept_rows": len(kept),
        "keep_policy": policy,
        "lm_head": lm_head,
        "tied_embeddings": tied,
    }
    report = _report(loaded, options, weight, tables, metadata, counts, share)
    base = source_gguf(str(options.model.name_or_path), options.gguf) if options.export else None
    # every file replaces the previous set as one unit: never an INT4 table under an INT8
    # report, never an export of another table
    with replaced_folder(options.out, fmt=qformat.FORMAT) as new:
        qformat.write(new / qformat.FILENAME, tables, metadata)
        if options.export:
            with progress.progress("writing exports"):
                exports = write_exports(
                    options.export, loaded, tables, metadata, new, base, options.include_lm_head
                )
            report = dataclasses.replace(report, exports=exports)
        write_bytes(new / REPORT, canonical_json(report.to_dict()).encode("utf-8"))
    return QuantizeResult(out=options.out, report=report, warnings=warnings)


def _tables(
    model: Any, weight: torch.Tensor, kept_ids: torch.Tensor, options: QuantizeOptions
) -> tuple[dict[str, qformat.StoredTable], str, bool]:
    """The quantized input table (and output projection), how the head is served, tied or not."""
    tables = {
        "embed": qformat.StoredTable(
            quantize(weight, options.bits, options.group_size, int8_groups=options.grouped),
            kept_ids,
            weight[kept_ids].to(torch.float16),
        )
    }
    out_weight = getattr(model.get_output_embeddings(), "weight", None)
    tied = (
        out_weight is not None
        and out_weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    )
    if not options.include_lm_head or out_weight is None:
        return tables, "none", tied
    if tied:
        return tables, "tied", tied
    head = out_weight.detach().to("cpu")
    check_finite(head, "the output projection")
    tables["lm_head"] = qformat.StoredTable(
        quantize(head, options.bits, options.group_size, int8_groups=options.grouped),
        kept_ids,
        head[kept_ids].to(torch.float16),
    )
    return tables, "separate", tied


def _report(
    loaded: LoadedModel,
    options: QuantizeOptions,
    weight: torch.Tensor,
    tables: dict[str, qformat.StoredTable],
    metadata: dict[str, Any],
    counts: Any,
    share: float,
) -> QuantizeReport:
    model, tokenizer = loaded.model, loaded.tokenizer
    vocab, hidden = weight.shape
    module, head_module = quantized_modules(tables, {"lm_head": metadata["lm_head"]}, model)
    sqnr, cosine = row_errors(weight, module)  # converted block by block: no float copy
    fp16_bytes = vocab * hidden * 2
    embed_bytes = _table_bytes(tables["embed"])
    fidelity = None
    if options.prompts is not None:
        prompts = load_prompts(options.prompts)
        fidelity = logit_fidelity(model, tokenizer, prompts, module, head_module)
    return QuantizeReport(
        **{
            k: v
            for k, v in metadata.items()
            if k not in ("model_fingerprint", "tokenizer_fingerprint", "fingerprint_scheme")
        },
        fingerprints={"model": loaded.model_fingerprint, "tokenizer": loaded.tokenizer_fingerprint},
        memory=MemoryReport(
            fp16_bytes=fp16_bytes,
            source_bytes=weight.numel() * weight.element_size(),
            quantized_bytes=embed_bytes,
            ratio_vs_fp16=embed_bytes / fp16_bytes,
            bits_per_weight=embed_bytes * 8 / (vocab * hidden),
            lm_head_bytes=_table_bytes(tables["lm_head"]) if "lm_head" in tables else 0,
        ),
        corpus=CorpusReport(files=counts.files, tokens=counts.tokens, fp16_token_share=share),
        rows=_summarize_rows(sqnr, cosine, tokenizer),
        logit_fidelity=fidelity,
    )
