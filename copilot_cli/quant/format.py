"""OUT/embeddings.safetensors: the quantized table(s), their scales and the FP16 rows kept.

Tensors (prefix `embed.`, and `lm_head.` when an untied output projection is quantized too):
    {p}.q          int8 [vocab, hidden] (8-bit) or uint8 [vocab, hidden / 2] (4-bit, packed)
    {p}.scales     float16 [vocab] (8-bit per row) or [vocab, hidden / group_size] (grouped)
    {p}.kept_ids   int64 [kept] sorted token ids served from FP16
    {p}.kept_rows  float16 [kept, hidden] those rows, cast from the original
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from copilot_cli import __version__
from copilot_cli.core.artifacts import check_header, save_safetensors
from copilot_cli.core.errors import ArtifactError
from copilot_cli.core.safetensors_io import read_verified, tensor_view
from copilot_cli.quant.scheme import QuantizedTable

FORMAT = "copilot-opt.quantized-embeddings"
FORMAT_VERSION = 2  # 2: sealed by a digest over header and data
FILENAME = "embeddings.safetensors"


@dataclass
class StoredTable:
    table: QuantizedTable
    kept_ids: torch.Tensor
    kept_rows: torch.Tensor


def write(path: Path, tables: dict[str, StoredTable], metadata: dict[str, Any]) -> None:
    tensors: dict[str, torch.Tensor] = {}
    for prefix, stored in tables.items():
        tensors[f"{prefix}.q"] = stored.table.q
        tensors[f"{prefix}.scales"] = stored.table.scales
        tensors[f"{prefix}.kept_ids"] = stored.kept_ids.to(torch.int64)
        tensors[f"{prefix}.kept_rows"] = stored.kept_rows.to(torch.float16)
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "copilot_opt_version": __version__,
        "torch_version": torch.__version__,
        **metadata,
    }
    save_safetensors(path, tensors, meta)


def read(
    path: Path, *, model_fingerprint: str | None = None, tokenizer_fingerprint: str | None = None
) -> tuple[dict[str, StoredTable], dict[str, str]]:
    """Read and check a quantized-embeddings file: every byte (digest), format, version,
    fingerprints, and each tensor's dtype and shape against the scheme the metadata names."""
    where = str(path)
    if not path.is_file():
        raise ArtifactError("no quantized embeddings here", where=where)
    header, metadata, buffer, start = read_verified(path)
    check_header(
        metadata,
        where=where,
        fmt=FORMAT,
        version=FORMAT_VERSION,
        model_fingerprint=model_fingerprint,
        tokenizer_fingerprint=tokenizer_fingerprint,
    )
    try:
        bits, cols = int(metadata["bits"]), int(metadata["hidden_size"])
        group = (
            None if metadata.get("group_size") in (None, "null") else int(metadata["group_size"])
        )
        rows = int(metadata["vocab_size"])
        kept = int(metadata["kept_rows"])
    except (KeyError, ValueError) as exc:
        raise ArtifactError(f"malformed metadata ({exc})", where=where) from None
    bad_group = (bits == 4 and group is None) or (group is not None and (group < 1 or cols % group))
    if bits not in (4, 8) or bad_group or not 0 <= kept <= rows:
        raise ArtifactError(
            f"malformed metadata (bits {bits}, group_size {group}, kept_rows {kept} of {rows})",
            where=where,
        )
    prefixes = sorted({name.split(".")[0] for name in header})
    expected = {}
    for prefix in prefixes:
        expected.update(_expected(prefix, bits, group, rows, cols, kept))
    found = {name: (e["dtype"], e["shape"]) for name, e in header.items()}
    if found != expected or "embed" not in prefixes or not set(prefixes) <= {"embed", "lm_head"}:
        raise ArtifactError("tensors differ from what the metadata describes", where=where)
    tensors = {name: tensor_view(buffer, start, entry) for name, entry in header.items()}
    tables = {}
    for prefix in prefixes:
        table = QuantizedTable(
            bits=bits,
            group_size=group,
            q=tensors[f"{prefix}.q"],
            scales=tensors[f"{prefix}.scales"],
            cols=cols,
        )
        kept_ids = tensors[f"{prefix}.kept_ids"]
        if kept_ids.numel() and (
            int(kept_ids[0]) < 0 or int(kept_ids[-1]) >= rows or bool((kept_ids.diff() <= 0).any())
        ):  # every lookup indexes with them: ascending, distinct, inside the table
            raise ArtifactError(
                f"{prefix}.kept_ids are not ascending token ids inside [0, {rows:,})", where=where
            )
        tables[prefix] = StoredTable(table, kept_ids, tensors[f"{prefix}.kept_rows"])
    return tables, metadata


def _expected(
    prefix: str, bits: int, group: int | None, rows: int, cols: int, kept: int
) -> dict[str, tuple[str, list[int]]]:
    """name -> (dtype, shape) of one stored table under the scheme its metadata names."""
    if bits == 8:
        q = ("I8", [rows, cols])
        scales = ("F16", [rows] if group is None else [rows, cols // group])
    else:
        q, scales = ("U8", [rows, cols // 2]), ("F16", [rows, cols // (group or 1)])
    return {
        f"{prefix}.q": q,
        f"{prefix}.scales": scales,
        f"{prefix}.kept_ids": ("I64", [kept]),
        f"{prefix}.kept_rows": ("F16", [kept, cols]),
    }
