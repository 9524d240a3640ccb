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
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from copilot_cli import __version__
from copilot_cli.core import lazy, verified
from copilot_cli.core.artifacts import (
    FINGERPRINT_SCHEME,
    check_header,
    check_scheme,
    check_sealed,
    decode_metadata,
    encode_metadata,
    is_count,
    read_json_artifact,
    save_safetensors,
)
from copilot_cli.core.errors import ArtifactError
from copilot_cli.core.safetensors_io import DIGEST_KEY, read_verified, tensor_view

transformers = lazy.module("transformers")

SEGMENT_FORMAT = "copilot-opt.kv-segment"
INDEX_FORMAT = "copilot-opt.kv-cache"
MAX_TOKEN_ID = 1 << 31  # no vocabulary comes near; larger ids are damage, not tokens
FORMAT_VERSION = 2  # 2: sealed by a digest over header and data; index sealed and checked
INDEX = "index.json"
SEGMENTS_DIR = "segments"
_ST_NAMES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
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
    """Read a segment, verifying every byte (the digest over its header and data), its format,
    fingerprints and shapes, and its identity (the segment hash recomputed from its tokens).

    Nothing is handed out before every check passed: a truncated, bit-flipped or edited file
    raises ArtifactError, a file made for another model or tokenizer FingerprintMismatch. The
    tensors view a private copy-on-write map: a caller writing into one changes its own pages.
    """
    where = str(path)
    if not path.is_file():
        raise ArtifactError("segment file is missing", where=where)
    header, metadata, buffer, start = read_verified(path)
    check_metadata(
        metadata,
        where,
        model_fingerprint=model_fingerprint,
        tokenizer_fingerprint=tokenizer_fingerprint,
        geometry=geometry,
    )
    expected = _expected_tensors(metadata, where)
    found = {name: (e["dtype"], e["shape"]) for name, e in header.items()}
    if found != expected:
        raise ArtifactError("tensors differ from what the metadata describes", where=where)
    tensors = {name: tensor_view(buffer, start, entry) for name, entry in header.items()}
    token_ids = tensors["token_ids"].tolist()
    if not verified.held("segment-hash", metadata[DIGEST_KEY]):  # digest: verified content
        own = segment_hash(
            metadata.get("parent", ""), token_ids, metadata["model_fingerprint"], metadata["dtype"]
        )
        if own != metadata.get("segment_hash"):
            raise ArtifactError("segment hash does not match its tokens", where=where)
        verified.hold("segment-hash", metadata[DIGEST_KEY])
    layers = len(expected) // 2
    keys = [tensors[f"layers.{i}.keys"] for i in range(layers)]
    values = [tensors[f"layers.{i}.values"] for i in range(layers)]
    return SegmentData(path=path, metadata=metadata, token_ids=token_ids, keys=keys, values=values)


def _expected_tensors(metadata: dict[str, str], where: str) -> dict[str, tuple[str, list[int]]]:
    """name -> (dtype, shape) every tensor must have, from the metadata."""
    try:
        layers, length = int(metadata["num_layers"]), int(metadata["length"])
        kv_heads = decode_metadata(metadata, "kv_heads", where=where)
        head_dims = decode_metadata(metadata, "head_dims", where=where)
        dtype = _ST_NAMES[metadata["dtype"]]
        expected: dict[str, tuple[str, list[int]]] = {"token_ids": ("I64", [length])}
        for i in range(layers):
            shape = [kv_heads[i], length, head_dims[i]]
            expected[f"layers.{i}.keys"] = expected[f"layers.{i}.values"] = (dtype, shape)
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise ArtifactError(f"malformed segment metadata ({exc})", where=where) from None
    return expected


def read_index(kv_dir: Path) -> dict[str, Any]:
    """index.json, its digest, shape and internal consistency checked (no segment is read):
    every prefix's segments chain from position 0 to its length, each segment's parent is the
    one before it, and the block hashes are those of its token ids."""
    where = str(kv_dir / INDEX)
    try:
        stat = (kv_dir / INDEX).stat()
    except OSError:
        stat = None
    known = verified.recall("kv-index", kv_dir / INDEX, stat) if stat is not None else None
    if known is not None:
        return known  # unchanged since this process checked it (read-only, shared)
    index = read_json_artifact(
        kv_dir / INDEX, fmt=INDEX_FORMAT, version=FORMAT_VERSION, what="KV cache folder"
    )
    check_scheme(index, where=where, fmt=INDEX_FORMAT)
    check_sealed(index, where=where)
    try:
        _check_index(index)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ArtifactError(f"malformed index ({type(exc).__name__}: {exc})", where=where) from None
    if stat is not None:  # stat taken before the read: a file replaced since has a new inode
        verified.remember("kv-index", kv_dir / INDEX, stat, index)
    return index


def _check_index(index: dict[str, Any]) -> None:
    segments, prefixes = index["segments"], index["prefixes"]
    if not isinstance(segments, dict) or not isinstance(prefixes, dict):
        raise TypeError("'segments' and 'prefixes' must be objects")
    if not is_count(index["block_size"]) or not index["block_size"]:
        raise ValueError("block_size must be a positive integer")
    if not isinstance(index["model_fingerprint"], str):
        raise TypeError("model_fingerprint must be a string")
    for seg_hash, info in segments.items():
        if not isinstance(info, dict):
            raise TypeError(f"segment {seg_hash[:16]} must be an object")
        if not all(is_count(info[key]) for key in ("start", "length", "bytes")):
            raise ValueError(f"segment {seg_hash[:16]}: start, length and bytes must be counts")
        if not isinstance(info["parent"], str) or not isinstance(info["file"], str):
            raise TypeError(f"segment {seg_hash[:16]}: parent and file must be strings")
    leads: dict[tuple[int, ...], str] = {}
    for name, entry in prefixes.items():
        ids = entry["token_ids"]
        if not isinstance(ids, list) or not all(type(t) is int for t in ids):
            raise TypeError(f"{name}: token_ids must be a list of integers")
        if not all(0 <= t < MAX_TOKEN_ID for t in ids):  # before anything packs them
            raise ValueError(f"{name}: a token id is outside [0, {MAX_TOKEN_ID:,})")
        if entry["tokens"] != len(ids):
            raise ValueError(f"{name}: tokens {entry['tokens']} != {len(ids)} token ids")
        position, parent = 0, ""
        for seg_hash in entry["segments"]:
            info = segments[seg_hash]
            if info["start"] != position or info["parent"] != parent or info["length"] < 1:
                raise ValueError(f"{name}: its segments do not chain")
            if info["file"] != f"{SEGMENTS_DIR}/{seg_hash}.safetensors":
                raise ValueError(f"{name}: a segment names another file")
            position, parent = position + info["length"], seg_hash
        if position != len(ids):
            raise ValueError(f"{name}: its segments hold {position} of {len(ids)} tokens")
        hashes = block_hashes(ids, index["block_size"], index["model_fingerprint"])
        if entry["block_hashes"] != hashes:
            raise ValueError(f"{name}: block hashes do not match its token ids")
        _check_kind(name, entry, leads)


def _check_kind(name: str, entry: dict[str, Any], leads: dict[tuple[int, ...], str]) -> None:
    """A prefix is kind "prefix" with no lead; a chunk is named by its text's digest, and its
    lead (the canonical start every chunk is computed after) is 1..tokens-1 tokens long and the
    same tokens in every chunk of the folder."""
    kind, lead = entry.get("kind", "prefix"), entry.get("lead_tokens", 0)
    if kind not in ("prefix", "chunk"):
        raise ValueError(f"{name}: kind {kind!r} is neither 'prefix' nor 'chunk'")
    if type(lead) is not int:
        raise TypeError(f"{name}: lead_tokens must be an integer")
    digest = entry.get("text_sha256")
    if digest is not None and not (isinstance(digest, str) and len(digest) == 64):
        raise ValueError(f"{name}: text_sha256 is not a sha256")
    if kind == "prefix":
        if lead != 0:
            raise ValueError(f"{name}: a prefix has no lead (lead_tokens {lead})")
        return
    if not 0 < lead < len(entry["token_ids"]):
        raise ValueError(f"{name}: lead_tokens {lead} is outside 1..{len(entry['token_ids']) - 1}")
    if name != f"chunk/{digest}":
        raise ValueError(f"{name}: a chunk is named by its text's digest (text_sha256)")
    first = leads.setdefault(tuple(entry["token_ids"][:lead]), name)
    if len(leads) > 1:
        raise ValueError(f"{name}: its lead differs from {first}'s (every chunk has one lead)")


@dataclass(frozen=True)
class SegmentEntry:
    """One segment as the index records it (its file is read only when needed)."""

    hash: str
    start: int
    length: int
    parent: str
    file: str
    bytes: int


@dataclass(frozen=True)
class PrefixEntry:
    """One stored prefix (or chunk): its tokens and the chain of segments holding them."""

    name: str
    token_ids: tuple[int, ...]
    segments: tuple[str, ...]
    block_hashes: tuple[str, ...]
    origin: str
    kind: str = "prefix"  # "chunk": chunk KV, its own tokens after `lead_tokens`
    lead_tokens: int = 0


@dataclass(frozen=True)
class KVIndex:
    """A KV folder's index.json, checked and typed: what every reader of a KV folder (the
    loader, the stores, the vLLM connector, serve, warm-plan) reads, never the raw JSON."""

    model_fingerprint: str
    tokenizer_fingerprint: str
    dtype: str
    block_size: int
    geometry: ModelGeometry
    prefixes: Mapping[str, PrefixEntry]
    segments: Mapping[str, SegmentEntry]

    @classmethod
    def from_dict(cls, index: dict[str, Any]) -> KVIndex:
        g = index["geometry"]
        segments = {
            h: SegmentEntry(h, s["start"], s["length"], s["parent"], s["file"], s["bytes"])
            for h, s in index["segments"].items()
        }
        prefixes = {
            name: PrefixEntry(
                name=name,
                token_ids=tuple(e["token_ids"]),
                segments=tuple(e["segments"]),
                block_hashes=tuple(e["block_hashes"]),
                origin=str(e.get("origin", "")),
                kind=str(e.get("kind", "prefix")),
                lead_tokens=int(e.get("lead_tokens", 0)),
            )
            for name, e in index["prefixes"].items()
        }
        geometry = ModelGeometry(
            num_layers=int(g["num_layers"]),
            kv_heads=list(g["kv_heads"]),
            head_dims=list(g["head_dims"]),
            rope=dict(g["rope"]),
            context_length=int(g["context_length"]),
            sliding_window=g["sliding_window"],
        )
        return cls(
            model_fingerprint=index["model_fingerprint"],
            tokenizer_fingerprint=str(index.get("tokenizer_fingerprint", "")),
            dtype=str(index["dtype"]),
            block_size=index["block_size"],
            geometry=geometry,
            prefixes=MappingProxyType(prefixes),
            segments=MappingProxyType(segments),
        )

    def chain(self, name: str) -> list[SegmentEntry]:
        """The segments of prefix `name`, from position 0."""
        return [self.segments[h] for h in self.prefixes[name].segments]


def load_index(kv_dir: Path) -> KVIndex:
    """`read_index`, typed (ArtifactError naming index.json when a field is malformed)."""
    index = read_index(kv_dir)
    try:
        return KVIndex.from_dict(index)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ArtifactError(
            f"malformed index ({type(exc).__name__}: {exc})", where=str(kv_dir / INDEX)
        ) from None
