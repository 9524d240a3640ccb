"""Deterministic safetensors writing (the reference writer orders metadata by hash map).

Files written here are plain safetensors: any reader (safetensors, candle, llama.cpp tools)
loads them. We write the header ourselves so that the same tensors and metadata always give
the same bytes, and stream tensor data to disk instead of building one large buffer.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

import torch

from copilot_cli.core.errors import ArtifactError

_DTYPE_NAMES = {
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
        if tensor.dtype not in _DTYPE_NAMES:
            raise TypeError(f"tensor {name!r}: dtype {tensor.dtype} is not supported")
        size = tensor.numel() * tensor.element_size()
        header[name] = {
            "dtype": _DTYPE_NAMES[tensor.dtype],
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


def read_header(path: Path) -> tuple[dict[str, dict], dict[str, str]]:
    """Read and check a safetensors header: (tensor entries, metadata).

    Raises ArtifactError when the file is truncated or its header is malformed, before any
    tensor is read, so a damaged file never yields a partial result.
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ArtifactError("file is too short to be safetensors", where=str(path))
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > size - 8 or header_len > 100_000_000:
                raise ArtifactError(
                    f"header length {header_len} exceeds the file size {size}: truncated "
                    "or not a safetensors file",
                    where=str(path),
                )
            header = json.loads(handle.read(header_len))
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"unreadable safetensors header ({exc})", where=str(path)) from exc
    if not isinstance(header, dict):
        raise ArtifactError("safetensors header is not a JSON object", where=str(path))
    metadata = header.pop("__metadata__", None) or {}
    data_end = max((entry["data_offsets"][1] for entry in header.values()), default=0)
    if 8 + header_len + data_end != size:
        raise ArtifactError(
            f"expected {8 + header_len + data_end} bytes, found {size}: the file is truncated "
            "or has trailing garbage",
            where=str(path),
        )
    return header, metadata


def tensor_checksum(tensors: Mapping[str, torch.Tensor]) -> str:
    """xxh3-128 over the tensors' bytes in file (sorted name) order: fast enough to verify on
    every load, so a bit-flipped artifact is refused."""
    import xxhash

    digest = xxhash.xxh3_128()
    for name in sorted(tensors):
        digest.update(tensor_bytes(tensors[name]))
    return digest.hexdigest()
