"""OUT/embeddings.safetensors: the quantized table(s), their scales and the FP16 rows kept.

Tensors (prefix `embed.`, and `lm_head.` when an untied output projection is quantized too):
    {p}.q          int8 [vocab, hidden] (8-bit) or uint8 [vocab, hidden / 2] (4-bit, packed)
    {p}.scales     float16 [vocab] (8-bit) or [vocab, hidden / group_size] (4-bit)
    {p}.kept_ids   int64 [kept] sorted token ids served from FP16
    {p}.kept_rows  float16 [kept, hidden] those rows, cast from the original
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from copilot_cli import __version__
from copilot_cli.core.artifacts import check_header, save_safetensors
from copilot_cli.core.errors import ArtifactError
from copilot_cli.core.safetensors_io import read_header, tensor_checksum
from copilot_cli.quant.scheme import QuantizedTable

FORMAT = "copilot-opt.quantized-embeddings"
FORMAT_VERSION = 1
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
        "tensor_checksum": tensor_checksum(tensors),
        **metadata,
    }
    save_safetensors(path, tensors, meta)


def read(
    path: Path, *, model_fingerprint: str | None = None, tokenizer_fingerprint: str | None = None
) -> tuple[dict[str, StoredTable], dict[str, str]]:
    """Read and check a quantized-embeddings file (format, version, fingerprints, checksum)."""
    where = str(path)
    if not path.is_file():
        raise ArtifactError("no quantized embeddings here", where=where)
    _, metadata = read_header(path)
    check_header(
        metadata,
        where=where,
        fmt=FORMAT,
        version=FORMAT_VERSION,
        model_fingerprint=model_fingerprint,
        tokenizer_fingerprint=tokenizer_fingerprint,
    )
    tensors: dict[str, torch.Tensor] = {}
    with safe_open(str(path), framework="pt") as handle:
        for name in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
            tensors[name] = handle.get_tensor(name)
    if tensor_checksum(tensors) != metadata.get("tensor_checksum"):
        raise ArtifactError("tensor checksum mismatch: the file is corrupt", where=where)
    bits = int(metadata["bits"])
    group = None if metadata.get("group_size") in (None, "null") else int(metadata["group_size"])
    cols = int(metadata["hidden_size"])
    tables = {}
    for prefix in ("embed", "lm_head"):
        if f"{prefix}.q" in tensors:
            table = QuantizedTable(
                bits=bits,
                group_size=group,
                q=tensors[f"{prefix}.q"],
                scales=tensors[f"{prefix}.scales"],
                cols=cols,
            )
            tables[prefix] = StoredTable(
                table, tensors[f"{prefix}.kept_ids"], tensors[f"{prefix}.kept_rows"]
            )
    return tables, metadata
