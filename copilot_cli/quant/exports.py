"""quantize --export: the quantized table in the formats the serving engines load, written in
the same staging folder as embeddings.safetensors (all swapped in as one unit).

    gguf                 OUT/model.gguf: the source GGUF, its embedding re-encoded
                         (quant/gguf_export.py); from `--model X.gguf`, or a transformers
                         folder with `--gguf BASE.gguf` (the same model converted by llama.cpp's
                         convert_hf_to_gguf.py: its vocabulary is checked against the folder's)
    compressed-tensors   OUT/compressed-tensors/: a complete checkpoint (quant/ct_export.py)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from copilot_cli.core.artifacts import sha256_file
from copilot_cli.core.errors import InputError
from copilot_cli.core.fingerprints import tokenizer_fingerprint
from copilot_cli.core.gguf import gguf_file, load_gguf_tokenizer
from copilot_cli.quant import ct_export, gguf_export
from copilot_cli.quant.results import ExportReport

GGUF_NAME = "model.gguf"
CT_FOLDER = "compressed-tensors"


def source_gguf(model_name: str, base: Path | None) -> Path | None:
    """The GGUF an export starts from: `--gguf`, else the model when it is a GGUF file."""

    return base if base is not None else gguf_file(model_name)


def check_gguf_source(path: Path, loaded: Any) -> None:
    """A `--gguf` base beside a transformers folder must be the same model's: its vocabulary
    (the tokenizer llama.cpp builds from it) must fingerprint like the folder's tokenizer."""

    if gguf_file(str(loaded.source)) is not None:
        return  # the model itself: the same file
    theirs = tokenizer_fingerprint(load_gguf_tokenizer(path))
    if theirs != loaded.tokenizer_fingerprint:
        raise InputError(
            "its vocabulary is not the model's tokenizer: give the GGUF converted from "
            f"{loaded.source}",
            where=str(path),
        )


def write_exports(
    formats: tuple[str, ...],
    loaded: Any,
    tables: dict[str, Any],
    metadata: dict[str, Any],
    staging: Path,
    gguf: Path | None,
    include_lm_head: bool,
) -> list[ExportReport]:
    """Every export asked for, into `staging`; the reports say what each holds."""
    reports = []
    if "gguf" in formats:
        if gguf is None:
            raise InputError(
                "--export gguf needs a GGUF to start from: --model X.gguf, or --gguf BASE.gguf "
                "beside a transformers folder (convert it with llama.cpp's convert_hf_to_gguf.py)",
                where="--export",
            )
        reports.append(_gguf(loaded, tables, metadata, staging, gguf))
    if "compressed-tensors" in formats:
        written = ct_export.write_checkpoint(loaded, tables, staging / CT_FOLDER, include_lm_head)
        table = tables["embed"].table
        reports.append(
            ExportReport(
                format="compressed-tensors",
                path=CT_FOLDER,
                tensors={
                    "embed": {
                        "type_before": metadata["source_dtype"],
                        "type_after": written["format"],
                        "bytes_before": table.rows * table.cols * _itemsize(metadata),
                        # int8/packed values and float32 scales
                        "bytes_after": table.q.numel() + table.scales.numel() * 4,
                    }
                },
                kept_rows=metadata["kept_rows"],
                kept_rows_note=_kept_note(metadata, "quantized like the other rows", "stored"),
                output=written["lm_head"],
                file_bytes=written["bytes"],
            )
        )
    return reports


def _gguf(
    loaded: Any, tables: dict[str, Any], metadata: dict[str, Any], staging: Path, base: Path
) -> ExportReport:
    check_gguf_source(base, loaded)
    embed = tables["embed"]
    source = gguf_export.open_source(base, embed.table.rows, embed.table.cols)
    encoded = {
        gguf_export.EMBEDDING: gguf_export.encode(embed.table, embed.kept_ids, embed.kept_rows)
    }
    if "lm_head" in tables and not source.tied:
        head = tables["lm_head"]
        encoded[gguf_export.OUTPUT] = gguf_export.encode(head.table, head.kept_ids, head.kept_rows)
    keys = gguf_export.export_keys(metadata, sha256_file(base), base.name)
    written = gguf_export.write_export(source, staging / GGUF_NAME, encoded, keys)
    output = (
        "tied: llama.cpp reads the re-encoded table for the output projection too"
        if source.tied
        else "re-encoded (--include-lm-head)"
        if gguf_export.OUTPUT in encoded
        else "as in the source"
    )
    return ExportReport(
        format="gguf",
        path=GGUF_NAME,
        tensors=written["tensors"],
        kept_rows=metadata["kept_rows"],
        kept_rows_note=_kept_note(
            metadata,
            f"{encoded[gguf_export.EMBEDDING].type_name} blocks with scales of their own",
            "stored as",
        ),
        output=output,
        file_bytes=(staging / GGUF_NAME).stat().st_size,
        source={
            "name": base.name,
            "sha256": keys[f"{gguf_export.KEY}source.sha256"],
            "bytes": base.stat().st_size,
        },
    )


def _kept_note(metadata: dict[str, Any], how: str, verb: str) -> str:
    kept = int(metadata["kept_rows"])
    if not kept:
        return "no rows kept in FP16"
    return f"the {kept} rows kept in FP16 are {verb} {how} (one type per tensor)"


def _itemsize(metadata: dict[str, Any]) -> int:
    return {"float32": 4, "float64": 8}.get(metadata["source_dtype"], 2)
