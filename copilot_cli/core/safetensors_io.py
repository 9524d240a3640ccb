"""Deterministic safetensors writing (the reference writer orders metadata by hash map).

Files written here are plain safetensors: any reader (safetensors, candle, llama.cpp tools)
loads them. We write the header ourselves so that the same tensors and metadata always give
the same bytes, and stream tensor data to disk instead of building one large buffer.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import torch
import xxhash

from copilot_cli.core import verified
from copilot_cli.core.errors import ArtifactError

DTYPE_NAMES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
_TORCH_DTYPES = {name: dtype for dtype, name in DTYPE_NAMES.items()}
_ALIGN = 8  # header padded so tensor data starts 8-byte aligned (mmap-friendly)


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """Raw little-endian bytes of a tensor, without copying when it is already contiguous."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    return memoryview(flat.view(torch.uint8).numpy()).cast("B")


def build_header(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> bytes:
    """The length-prefixed JSON header for `tensors` laid out in sorted name order."""
    header: dict[str, object] = {}
    if metadata:
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"safetensors metadata must be str -> str, got {key!r}")
        header["__metadata__"] = dict(sorted(metadata.items()))
    offset = 0
    for name in sorted(tensors):
        tensor = tensors[name]
        if tensor.dtype not in DTYPE_NAMES:
            raise TypeError(f"tensor {name!r}: dtype {tensor.dtype} is not supported")
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": DTYPE_NAMES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":"), sort_keys=False).encode("utf-8")
    raw += b" " * (-(len(raw) + 8) % _ALIGN)
    return struct.pack("<Q", len(raw)) + raw


def write_safetensors(
    stream: BinaryIO, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]
) -> None:
    """Write `tensors` and `metadata` to an open binary stream, deterministically."""
    stream.write(build_header(tensors, metadata))
    for name in sorted(tensors):
        stream.write(tensor_bytes(tensors[name]))


_ITEM_SIZES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}
DIGEST_KEY = "digest"


def _check_entries(header: dict, data_size: int, where: str) -> None:
    """Every tensor entry well-formed and the entries tiling the data region exactly, in order,
    so no two tensors overlap and every byte belongs to one."""
    position = 0
    entries = sorted(header.items(), key=lambda item: _offsets(item[1], where)[0])
    for name, entry in entries:
        begin, end = _offsets(entry, where)
        dtype, shape = entry.get("dtype"), entry.get("shape")
        if dtype not in _ITEM_SIZES:
            raise ArtifactError(f"tensor {name!r}: unknown dtype {dtype!r}", where=where)
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise ArtifactError(f"tensor {name!r}: malformed shape {shape!r}", where=where)
        count = 1
        for d in shape:
            count *= d
        if begin != position or end - begin != count * _ITEM_SIZES[dtype]:
            raise ArtifactError(f"tensor {name!r}: offsets do not match its shape", where=where)
        position = end
    if position != data_size:
        raise ArtifactError("tensor data does not fill the file exactly", where=where)


def _offsets(entry: Any, where: str) -> tuple[int, int]:
    offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise ArtifactError("a tensor entry has malformed data_offsets", where=where)
    return offsets[0], offsets[1]


def read_header(path: Path) -> tuple[dict[str, dict], dict[str, str]]:
    """Read and check a safetensors header: (tensor entries, metadata).

    Raises ArtifactError when the file is truncated, its header is malformed, or its entries
    do not tile the data exactly, before any tensor is read, so a damaged file never yields a
    partial result.
    """
    where = str(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ArtifactError("file is too short to be safetensors", where=where)
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > size - 8 or header_len > 100_000_000:
                raise ArtifactError(
                    f"header length {header_len} exceeds the file size {size}: truncated "
                    "or not a safetensors file",
                    where=where,
                )
            header = json.loads(handle.read(header_len))
    except (OSError, ValueError, RecursionError) as exc:
        raise ArtifactError(f"unreadable safetensors header ({exc})", where=where) from exc
    if not isinstance(header, dict):
        raise ArtifactError("safetensors header is not a JSON object", where=where)
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise ArtifactError("safetensors metadata is not a str -> str object", where=where)
    _check_entries(header, size - 8 - header_len, where)
    return header, metadata


def _canonical_header(header: Mapping[str, Any], metadata: Mapping[str, str]) -> bytes:
    body = {
        "metadata": {k: v for k, v in metadata.items() if k != DIGEST_KEY},
        "tensors": {
            name: [e["dtype"], list(e["shape"]), list(e["data_offsets"])]
            for name, e in header.items()
        },
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sealed_metadata(
    tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]
) -> dict[str, str]:
    """`metadata` plus a `digest` over the canonical header (every tensor's dtype, shape and
    offsets, every metadata key) and every tensor byte: what `read_verified` checks."""

    header = json.loads(build_header(tensors, dict(metadata))[8:])
    header.pop("__metadata__", None)
    digest = xxhash.xxh3_128(_canonical_header(header, metadata))
    for name in sorted(tensors):
        digest.update(tensor_bytes(tensors[name]))
    return {**metadata, DIGEST_KEY: digest.hexdigest()}


def read_verified(path: Path) -> tuple[dict[str, dict], dict[str, str], Any, int]:
    """(header, metadata, a private copy-on-write map of the file, data start), after the
    digest over the canonical header and every data byte matched.

    A file this process verified before and that is unchanged since (core/verified.py: same
    device, inode, size, modification and change times, last changed more than 2 s ago) is not
    hashed again: reading a prefix a second time costs the map, not a pass over its bytes.

    Raises:
        ArtifactError: a damaged, truncated or edited file (including one written before
            files carried a digest).
    """

    where = str(path)
    known = None
    try:
        with path.open("rb") as handle:
            stat = os.fstat(handle.fileno())
            known = verified.recall("safetensors", path, stat)
            if known is not None:  # unchanged since verified: map it, nothing more to check
                buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
                header, metadata, start = known
                return dict(header), dict(metadata), buffer, start
    except OSError:
        pass  # read_header names the problem
    header, metadata = read_header(path)
    if DIGEST_KEY not in metadata:
        raise ArtifactError("carries no digest (an older format): make it again", where=where)
    with path.open("rb") as handle:
        stat = os.fstat(handle.fileno())
        buffer = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY) if stat.st_size else b""
    start = 8 + struct.unpack_from("<Q", buffer)[0]
    digest = xxhash.xxh3_128(_canonical_header(header, metadata))
    digest.update(memoryview(buffer)[start:])
    if digest.hexdigest() != metadata[DIGEST_KEY]:
        verified.forget("safetensors", path)
        raise ArtifactError("content does not match its digest: the file is corrupt", where=where)
    verified.remember("safetensors", path, stat, (dict(header), dict(metadata), start))
    return header, metadata, buffer, start


def tensor_view(buffer: Any, start: int, entry: dict[str, Any]) -> torch.Tensor:
    """A tensor over its bytes in a verified file map (copied out when unaligned)."""
    dtype = _TORCH_DTYPES[entry["dtype"]]
    begin, end = entry["data_offsets"]
    if end == begin:
        return torch.empty(entry["shape"], dtype=dtype)
    offset = start + begin
    size = dtype.itemsize
    if offset % size:
        raw = torch.frombuffer(bytearray(buffer[offset : start + end]), dtype=torch.uint8)
        return raw.view(dtype).reshape(entry["shape"])
    count = (end - begin) // size
    return torch.frombuffer(buffer, dtype=dtype, count=count, offset=offset).reshape(entry["shape"])


def read_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Every tensor of a sealed safetensors file (verified first), and its metadata."""
    header, metadata, buffer, start = read_verified(path)
    return {name: tensor_view(buffer, start, entry) for name, entry in header.items()}, metadata
