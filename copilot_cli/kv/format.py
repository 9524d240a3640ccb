"""The KV cache artifact: one safetensors file per radix-tree segment, plus an index.

    KV_DIR/index.json                       prefixes -> segment chains, fingerprints, settings
    KV_DIR/segments/<segment_hash>.safetensors

A segment file holds, for a run of tokens at positions [start, start+length):
    layers.{i}.keys, layers.{i}.values   [kv_heads_i, length, head_dim_i] (batch dim dropped)
    token_ids                            int64 [length]
and metadata naming everything needed to refuse a wrong use (see docs/formats.md).
"""

from __future__ import annotations

import hashlib
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import xxhash

from copilot_cli import __version__
from copilot_cli.core.artifacts import (
    FINGERPRINT_SCHEME,
    check_header,
    check_scheme,
    decode_metadata,
    encode_metadata,
    read_json_artifact,
    save_safetensors,
)
from copilot_cli.core.errors import ArtifactError
from copilot_cli.core.safetensors_io import read_header, tensor_checksum

SEGMENT_FORMAT = "copilot-opt.kv-segment"
INDEX_FORMAT = "copilot-opt.kv-cache"
FORMAT_VERSION = 1
INDEX = "index.json"
SEGMENTS_DIR = "segments"
_ST_DTYPES = {
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I8": torch.int8,
    "U8": torch.uint8,
}


def block_hashes(token_ids: list[int], block_size: int, model_fingerprint: str) -> list[str]:
    """vLLM-style chained block hashes over full blocks of `block_size` tokens.

    hash_i = sha256(hash_{i-1} ‖ token ids of block i as little-endian int64 ‖ model fingerprint),
    with hash_{-1} = "" — deterministic across processes and machines (never Python's hash()).
    A trailing partial block has no hash (it cannot be shared until it is full).
    """
    hashes: list[str] = []
    previous = b""
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        block = token_ids[start : start + block_size]
        digest = hashlib.sha256(previous)
        digest.update(struct.pack(f"<{len(block)}q", *block))
        digest.update(model_fingerprint.encode())
        previous = digest.hexdigest().encode()
        hashes.append(previous.decode())
    return hashes


def segment_hash(parent: str, token_ids: list[int], model_fingerprint: str, dtype: str) -> str:
    """Identity of a segment's KV: the same tokens after the same parent, model and dtype."""
    digest = hashlib.sha256(f"{parent}|{model_fingerprint}|{dtype}|".encode())
    digest.update(struct.pack(f"<{len(token_ids)}q", *token_ids))
    return digest.hexdigest()


@dataclass(frozen=True)
class ModelGeometry:
    """What a KV cache must agree with: layers, heads, head sizes, position encoding."""

    num_layers: int
    kv_heads: list[int]
    head_dims: list[int]
    rope: dict[str, Any]
    context_length: int
    sliding_window: int | None

    def to_metadata(self) -> dict[str, Any]:
        return {
            "num_layers": self.num_layers,
            "kv_heads": self.kv_heads,
            "head_dims": self.head_dims,
            "rope": self.rope,
        }


def write_segment(
    path: Path,
    *,
    keys: list[torch.Tensor],
    values: list[torch.Tensor],
    token_ids: list[int],
    start: int,
    parent: str,
    seg_hash: str,
    geometry: ModelGeometry,
    model_fingerprint: str,
    tokenizer_fingerprint: str,
    dtype: str,
    block_size: int,
    hashes: list[str],
) -> None:
    """Atomically write one segment file."""
    import transformers

    tensors: dict[str, torch.Tensor] = {"token_ids": torch.tensor(token_ids, dtype=torch.int64)}
    for index, (k, v) in enumerate(zip(keys, values, strict=True)):
        tensors[f"layers.{index}.keys"] = k.contiguous()
        tensors[f"layers.{index}.values"] = v.contiguous()
    metadata = {
        "format": SEGMENT_FORMAT,
        "format_version": str(FORMAT_VERSION),
        "model_fingerprint": model_fingerprint,
        "tokenizer_fingerprint": tokenizer_fingerprint,
        "fingerprint_scheme": FINGERPRINT_SCHEME,
        "dtype": dtype,
        **geometry.to_metadata(),
        "start": start,
        "length": len(token_ids),
        "parent": parent,
        "segment_hash": seg_hash,
        "block_size": block_size,
        "block_hashes": hashes,
        "tensor_checksum": tensor_checksum(tensors),
        "copilot_opt_version": __version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
    }
    save_safetensors(path, tensors, encode_metadata(metadata))


@dataclass
class SegmentData:
    """A segment read from disk and verified: metadata, token ids and per-layer tensors."""

    path: Path
    metadata: dict[str, str]
    token_ids: list[int]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def parent(self) -> str:
        return self.metadata["parent"]

    @property
    def start(self) -> int:
        return int(self.metadata["start"])

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


def check_metadata(
    metadata: dict[str, str],
    where: str,
    *,
    model_fingerprint: str | None,
    tokenizer_fingerprint: str | None,
    geometry: ModelGeometry | None,
) -> None:
    """Refuse a segment of another format, version, model, tokenizer or shape."""
    check_header(
        metadata,
        where=where,
        fmt=SEGMENT_FORMAT,
        version=FORMAT_VERSION,
        model_fingerprint=model_fingerprint,
        tokenizer_fingerprint=tokenizer_fingerprint,
    )
    if geometry is not None:
        layers = int(metadata.get("num_layers", -1))
        if layers != geometry.num_layers:
            raise ArtifactError(
                f"has {layers} layers, the model has {geometry.num_layers}", where=where
            )
        if (
            decode_metadata(metadata, "kv_heads", where=where) != geometry.kv_heads
            or decode_metadata(metadata, "head_dims", where=where) != geometry.head_dims
        ):
            raise ArtifactError("kv heads or head_dim differ from the model's", where=where)


def read_segment(
    path: Path,
    *,
    model_fingerprint: str | None = None,
    tokenizer_fingerprint: str | None = None,
    geometry: ModelGeometry | None = None,
) -> SegmentData:
    """Read a segment into fresh memory, verifying format, fingerprints, shapes and checksum.

    Nothing is handed out before every check passed: a truncated or bit-flipped file raises
    ArtifactError, a file made for another model or tokenizer FingerprintMismatch.
    """
    where = str(path)
    header, metadata = read_header(path)
    check_metadata(
        metadata,
        where,
        model_fingerprint=model_fingerprint,
        tokenizer_fingerprint=tokenizer_fingerprint,
        geometry=geometry,
    )
    # A private copy-on-write mapping: no copy is made up front, the checksum reads each page
    # once, and a caller writing into a tensor changes its own pages, never the file.
    with path.open("rb") as handle:
        buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    header_len = struct.unpack_from("<Q", buffer)[0]
    data = memoryview(buffer)[8 + header_len :]
    if xxhash.xxh3_128_hexdigest(data) != metadata.get("tensor_checksum"):
        raise ArtifactError("tensor checksum mismatch: the file is corrupt", where=where)
    tensors = {name: _view(buffer, 8 + header_len, entry, where) for name, entry in header.items()}
    layers = int(metadata["num_layers"])
    length = int(metadata["length"])
    token_ids = tensors["token_ids"].tolist()
    keys = [tensors[f"layers.{i}.keys"] for i in range(layers)]
    values = [tensors[f"layers.{i}.values"] for i in range(layers)]
    for tensor in (*keys, *values):
        if tensor.dim() != 3 or tensor.shape[1] != length:
            raise ArtifactError(
                f"tensor of shape {tuple(tensor.shape)} does not hold {length} positions",
                where=where,
            )
    return SegmentData(path=path, metadata=metadata, token_ids=token_ids, keys=keys, values=values)


def _view(buffer: mmap.mmap, base: int, entry: dict[str, Any], where: str) -> torch.Tensor:
    dtype = _ST_DTYPES.get(entry["dtype"])
    if dtype is None:
        raise ArtifactError(f"unsupported tensor dtype {entry['dtype']}", where=where)
    begin, end = entry["data_offsets"]
    count = (end - begin) // torch.empty((), dtype=dtype).element_size()
    if count == 0:
        return torch.empty(entry["shape"], dtype=dtype)
    offset = base + begin
    if offset % torch.empty((), dtype=dtype).element_size():  # unaligned: copy out
        raw = torch.frombuffer(bytearray(buffer[offset : offset + end - begin]), dtype=torch.uint8)
        return raw.view(dtype).reshape(entry["shape"])
    return torch.frombuffer(buffer, dtype=dtype, count=count, offset=offset).reshape(entry["shape"])


def read_index(kv_dir: Path) -> dict[str, Any]:
    index = read_json_artifact(
        kv_dir / INDEX, fmt=INDEX_FORMAT, version=FORMAT_VERSION, what="KV cache folder"
    )
    check_scheme(index, where=str(kv_dir / INDEX), fmt=INDEX_FORMAT)
    return index
