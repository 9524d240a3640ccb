"""What a KV folder or segment file holds (for `copilot-opt inspect`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from copilot_cli.core.artifacts import decode_metadata
from copilot_cli.core.errors import InputError
from copilot_cli.core.safetensors_io import read_header
from copilot_cli.kv.format import INDEX, read_index


def describe_segment(path: Path) -> dict[str, Any]:
    header, metadata = read_header(path)
    where = str(path)
    return {
        "file": str(path),
        "format": metadata.get("format"),
        "format_version": metadata.get("format_version"),
        "segment_hash": metadata.get("segment_hash"),
        "parent": metadata.get("parent") or None,
        "start": int(metadata.get("start", 0)),
        "length": int(metadata.get("length", 0)),
        "dtype": metadata.get("dtype"),
        "num_layers": int(metadata.get("num_layers", 0)),
        "kv_heads": decode_metadata(metadata, "kv_heads", where=where),
        "head_dims": decode_metadata(metadata, "head_dims", where=where),
        "block_size": int(metadata.get("block_size", 0)),
        "block_hashes": len(decode_metadata(metadata, "block_hashes", where=where)),
        "model_fingerprint": metadata.get("model_fingerprint"),
        "tokenizer_fingerprint": metadata.get("tokenizer_fingerprint"),
        "tensor_checksum": metadata.get("tensor_checksum"),
        "tensors": len(header),
        "bytes": path.stat().st_size,
    }


def describe(path: Path) -> dict[str, Any]:
    """A JSON-able description of a KV folder (index and totals) or of one segment file."""
    if path.is_file():
        return {"kind": "segment", **describe_segment(path)}
    if not path.is_dir():
        raise InputError("does not exist", where=str(path))
    if not (path / INDEX).is_file():
        raise InputError("neither a KV folder (index.json) nor a segment file", where=str(path))
    index = read_index(path)
    prefixes = [
        {
            "name": name,
            "tokens": entry["tokens"],
            "segments": len(entry["segments"]),
            "block_hashes": len(entry["block_hashes"]),
            "origin": entry["origin"],
        }
        for name, entry in index["prefixes"].items()
    ]
    segments = index["segments"]
    return {
        "kind": "kv-folder",
        "path": str(path),
        "format": index["format"],
        "format_version": index["format_version"],
        "dtype": index["dtype"],
        "block_size": index["block_size"],
        "model_fingerprint": index["model_fingerprint"],
        "tokenizer_fingerprint": index["tokenizer_fingerprint"],
        "geometry": index["geometry"],
        "prefixes": prefixes,
        "segments": len(segments),
        "sum_prefix_tokens": sum(p["tokens"] for p in prefixes),
        "distinct_tokens": sum(s["length"] for s in segments.values()),
        "bytes": sum(s["bytes"] for s in segments.values()),
    }
