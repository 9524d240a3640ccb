"""The serving side: load a stored prefix into a transformers cache, share prefixes, generate."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from copilot_cli.core import verified
from copilot_cli.core.errors import ArtifactError, FingerprintMismatch, InputError
from copilot_cli.core.fingerprints import model_fingerprint, tokenizer_fingerprint
from copilot_cli.core.safetensors_io import DIGEST_KEY
from copilot_cli.kv.format import (
    SEGMENTS_DIR,
    ModelGeometry,
    block_hashes,
    read_index,
    read_segment,
)
from copilot_cli.kv.geometry import model_geometry

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class StoredPrefix:
    name: str
    token_ids: list[int]
    segments: list[str]


class KVCacheDir:
    """An opened KV folder (index read and checked); segments are read on demand."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.index = read_index(self.path)

    @property
    def model_fingerprint(self) -> str:
        return self.index["model_fingerprint"]

    def names(self) -> list[str]:
        return sorted(self.index["prefixes"])

    def prefix(self, name_or_token_ids: str | list[int]) -> StoredPrefix:
        """A stored prefix by name, or the longest stored prefix that `token_ids` starts with."""
        prefixes = self.index["prefixes"]
        if isinstance(name_or_token_ids, str):
            if name_or_token_ids not in prefixes:
                raise InputError(
                    f"no stored prefix named {name_or_token_ids!r} (stored: "
                    f"{', '.join(self.names())})",
                    where=str(self.path),
                )
            entry = prefixes[name_or_token_ids]
            return StoredPrefix(name_or_token_ids, entry["token_ids"], entry["segments"])
        ids = list(name_or_token_ids)
        best = None
        for name, entry in prefixes.items():
            stored = entry["token_ids"]
            if (
                len(stored) <= len(ids)
                and ids[: len(stored)] == stored
                and (best is None or len(stored) > len(best.token_ids))
            ):
                best = StoredPrefix(name, stored, entry["segments"])
        if best is None:
            raise InputError("no stored prefix matches the given token ids", where=str(self.path))
        return best

    def segment_path(self, seg_hash: str) -> Path:
        return self.path / SEGMENTS_DIR / f"{seg_hash}.safetensors"


def _check_model(kv_model_fp: str, model: Any, where: str) -> tuple[str, ModelGeometry]:
    expected = model_fingerprint(model)
    if kv_model_fp != expected:
        raise FingerprintMismatch("model", expected=expected, found=kv_model_fp, where=where)
    return expected, model_geometry(model)


def _read_chain(
    paths: list[Path], model: Any, tokenizer: Any | None
) -> tuple[list[int], list[torch.Tensor], list[torch.Tensor]]:
    """Read and verify segments, checking they chain, and concatenate them per layer."""
    model_fp = model_fingerprint(model)
    geometry = model_geometry(model)
    tok_fp = tokenizer_fingerprint(tokenizer) if tokenizer is not None else None
    model_dtype = next(model.parameters()).dtype
    token_ids: list[int] = []
    keys: list[list[torch.Tensor]] = [[] for _ in range(geometry.num_layers)]
    values: list[list[torch.Tensor]] = [[] for _ in range(geometry.num_layers)]
    parent = ""
    segments = []
    for path in paths:
        segment = read_segment(
            path, model_fingerprint=model_fp, tokenizer_fingerprint=tok_fp, geometry=geometry
        )
        if segment.start != len(token_ids) or segment.parent != parent:
            raise ArtifactError(
                f"segment starts at position {segment.start} after {segment.parent[:16] or '-'}"
                f", expected {len(token_ids)} after {parent[:16] or '-'}: the chain is broken",
                where=str(path),
            )
        parent = segment.metadata["segment_hash"]
        segments.append(segment)
        stored = _DTYPES.get(segment.metadata.get("dtype", ""))
        if stored != model_dtype:
            raise ArtifactError(
                f"KV was computed in {segment.metadata.get('dtype')}, the model "
                f"runs in {str(model_dtype).removeprefix('torch.')}",
                where=str(path),
            )
        token_ids += segment.token_ids
        for i in range(geometry.num_layers):
            keys[i].append(segment.keys[i])
            values[i].append(segment.values[i])
    chain = (model_fp, *(s.metadata[DIGEST_KEY] for s in segments))
    if not verified.held("block-hashes", chain):  # digests name verified contents
        check_block_hashes(segments, token_ids, model_fp)
        verified.hold("block-hashes", chain)
    joined_k = [parts[0] if len(parts) == 1 else torch.cat(parts, dim=1) for parts in keys]
    joined_v = [parts[0] if len(parts) == 1 else torch.cat(parts, dim=1) for parts in values]
    return token_ids, joined_k, joined_v


def check_block_hashes(segments: list[Any], token_ids: list[int], model_fp: str) -> None:
    """Each segment's block hashes are those of the whole prefix's blocks ending in it."""
    if not segments:
        return
    size = int(segments[0].metadata["block_size"])
    hashes = block_hashes(token_ids, size, model_fp)
    for segment in segments:
        first = (segment.start + size - 1) // size
        last = (segment.start + len(segment.token_ids)) // size
        stored = json.loads(segment.metadata.get("block_hashes", "null"))
        if stored != hashes[first:last]:
            raise ArtifactError("block hashes do not match the tokens", where=str(segment.path))


def build_cache(model: Any, keys: list[torch.Tensor], values: list[torch.Tensor]) -> Any:
    """A DynamicCache holding `keys`/`values` ([kv_heads, seq, head_dim] per layer).

    Plain layers take the tensors as they are (no copy; DynamicCache appends by torch.cat, so
    the given tensors are never written); sliding-window layers go through `update`.
    """
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    device = next(model.parameters()).device
    # Only sliding-window models need the config-aware layer types (and they are slower to set up).
    cache = (
        DynamicCache(config=model.config)
        if model_geometry(model).sliding_window
        else DynamicCache()
    )
    if not cache.layers:
        cache.layers.extend(DynamicLayer() for _ in keys)
    for index, (k, v) in enumerate(zip(keys, values, strict=True)):
        k = k.unsqueeze(0).to(device)
        v = v.unsqueeze(0).to(device)
        layer = cache.layers[index] if index < len(cache.layers) else None
        if layer is not None and type(layer) is DynamicLayer:
            layer.lazy_initialization(k, v)
            layer.keys, layer.values = k, v
        else:
            cache.update(k, v, index)
    return cache


def load_prefix(
    path: Path | str,
    model: Any,
    name_or_token_ids: str | list[int],
    *,
    tokenizer: Any | None = None,
) -> Any:
    """Load a stored prefix as a transformers DynamicCache, ready to continue from.

    `path` is a KV folder (written by prefill-kv) or one segment file (its parents are found
    beside it). Every call returns a fresh cache the caller may mutate (generate does).
    Fingerprints (model; tokenizer when given), layer count, shapes, dtype and the tensor
    checksum are all checked before anything is returned.

    Raises:
        FingerprintMismatch: the KV was made with another model or tokenizer.
        ArtifactError: a truncated, bit-flipped or unknown-version file.
    """
    path = Path(path)
    if path.is_dir():
        kv = KVCacheDir(path)
        _check_model(kv.model_fingerprint, model, str(path))
        stored = kv.prefix(name_or_token_ids)
        paths = [kv.segment_path(h) for h in stored.segments]
    elif path.is_file():
        stored, paths = None, _chain_from_file(path)
    else:
        raise InputError("KV file or folder does not exist", where=str(path))
    token_ids, keys, values = _read_chain(paths, model, tokenizer)
    if stored is not None and token_ids != stored.token_ids:
        raise ArtifactError(
            f"segments of {stored.name!r} hold other tokens than its index entry", where=str(path)
        )
    return build_cache(model, keys, values)


def _chain_from_file(path: Path) -> list[Path]:
    from copilot_cli.core.safetensors_io import read_header

    chain = [path]
    while True:
        _, metadata = read_header(chain[0])
        parent = metadata.get("parent", "")
        if not parent:
            return chain
        parent_path = chain[0].parent / f"{parent}.safetensors"
        if not parent_path.is_file():
            raise ArtifactError(f"parent segment {parent[:16]} is missing", where=str(path))
        chain.insert(0, parent_path)


class PrefixStore:
    """Loaded prefixes shared across requests, reference-counted, LRU-evicted by bytes.

    Each prefix is read and verified once and kept as one copy; `acquire` hands out a new
    DynamicCache per request whose layers point at the shared tensors (no copy: appending
    creates new tensors, so requests never see each other's tokens).
    """

    def __init__(
        self,
        kv_dir: Path | str,
        model: Any,
        *,
        max_bytes: int = 2 << 30,
        tokenizer: Any | None = None,
        plan: Any = None,
        request_log: Any = None,
    ) -> None:
        """`plan` (a warm plan, or its path; `copilot-opt warm-plan`): its L0 prefixes are
        loaded now and never evicted, its L1 prefixes by a background thread in priority
        order (requests never wait for it), and `get` consults its Bloom filter before
        reading any other prefix from disk. `request_log` (a path or a warm.RequestLog):
        every `get` is appended to it, the input of `warm-plan`."""
        self.kv = KVCacheDir(kv_dir)
        self.model = model
        self.tokenizer = tokenizer
        self.max_bytes = max_bytes
        _check_model(self.kv.model_fingerprint, model, str(kv_dir))
        self._entries: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = self.evictions = self.bloom_skips = 0
        self.plan = None
        self._pinned: set[str] = set()
        self._planned: set[str] = set()  # L0 and L1: loaded on a miss without asking the filter
        self._warming: threading.Thread | None = None
        self._stop = threading.Event()
        if plan is not None:
            self._use_plan(plan)
        self.request_log = request_log
        if isinstance(request_log, (str, Path)):
            from copilot_cli.warm import RequestLog

            self.request_log = RequestLog(request_log)

    def _use_plan(self, plan: Any) -> None:
        from copilot_cli.warm import read_plan

        plan = read_plan(plan) if isinstance(plan, (str, Path)) else plan
        expected = self.kv.index["model_fingerprint"], self.kv.index["tokenizer_fingerprint"]
        if plan.kv and (plan.kv["model_fingerprint"], plan.kv["tokenizer_fingerprint"]) != expected:
            raise ArtifactError("the warm plan was made for another KV folder's model or tokenizer")
        self.plan = plan
        stored = self.kv.index["prefixes"]
        for item in plan.in_tier("L0"):
            if item.id in stored and item.id not in self._entries:
                self._entries[item.id] = self._load(item.id)
                self._pinned.add(item.id)
        l1 = [item.id for item in plan.in_tier("L1") if item.id in stored]
        self._planned = {item.id for item in plan.in_tier("L0")} | set(l1)
        self._warming = threading.Thread(target=self._warm, args=(l1,), daemon=True)
        self._warming.start()

    def _warm(self, names: list[str]) -> None:
        """Background pre-load of L1 (outside the lock: requests are served meanwhile)."""
        for name in names:
            if self._stop.is_set():
                return
            with self._lock:
                if name in self._entries:
                    continue
            entry = self._load(name)
            with self._lock:
                if name not in self._entries and self.bytes_held + entry["bytes"] <= self.max_bytes:
                    self._entries[name] = entry
                    self._entries.move_to_end(name, last=False)  # not the next one evicted

    def wait_warm(self, timeout: float | None = None) -> bool:
        """Block until the background pre-load finished (True) or `timeout` passed."""
        if self._warming is not None:
            self._warming.join(timeout)
            return not self._warming.is_alive()
        return True

    def close(self) -> None:
        """Stop the background pre-load."""
        self._stop.set()
        if self._warming is not None:
            self._warming.join()

    def get(self, name: str, *, session: str = "-", **context: Any) -> Any | None:
        """`acquire(name)`, except that with a plan a prefix neither resident nor possibly in
        its L2 tier (Bloom filter) is not read from disk: None (the caller prefills). With a
        request log, the request is logged (`context`: repository, files, chunks)."""
        if self.request_log is not None:
            self.request_log.record(session, name, **context)
        with self._lock:
            resident = name in self._entries
        planned = self.plan is None or name in self._planned
        if not resident and not planned and not self.plan.may_be_stored("prefix", name):
            self.bloom_skips += 1
            return None
        return self.acquire(name)

    @property
    def bytes_held(self) -> int:
        return sum(entry["bytes"] for entry in self._entries.values())

    def _load(self, name: str) -> dict[str, Any]:
        stored = self.kv.prefix(name)
        paths = [self.kv.segment_path(h) for h in stored.segments]
        token_ids, keys, values = _read_chain(paths, self.model, self.tokenizer)
        if token_ids != stored.token_ids:
            raise ArtifactError(
                f"segments of {name!r} hold other tokens than its index entry",
                where=str(self.kv.path),
            )
        nbytes = sum(t.numel() * t.element_size() for t in (*keys, *values))
        return {"token_ids": token_ids, "keys": keys, "values": values, "bytes": nbytes, "refs": 0}

    def acquire(self, name: str) -> Any:
        """A per-request cache for prefix `name`; call `release(name)` when done."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is None:
                self.misses += 1
                entry = self._entries[name] = self._load(name)
            else:
                self.hits += 1
            self._entries.move_to_end(name)
            entry["refs"] += 1
            self._evict()
        return build_cache(self.model, entry["keys"], entry["values"])

    def tensors(self, name: str) -> tuple[list[int], list[torch.Tensor], list[torch.Tensor]]:
        """(token ids, keys, values) of `name`, shared with every other request (never write
        into them); loaded and counted as `acquire` does, so `release(name)` when done."""
        self.acquire(name)
        with self._lock:
            entry = self._entries[name]
            return entry["token_ids"], entry["keys"], entry["values"]

    def release(self, name: str) -> None:
        with self._lock:
            entry = self._entries.get(name)
            if entry is not None and entry["refs"] > 0:
                entry["refs"] -= 1
            self._evict()

    def token_ids(self, name: str) -> list[int]:
        return list(self.kv.prefix(name).token_ids)

    def _evict(self) -> None:
        for name in list(self._entries):
            if self.bytes_held <= self.max_bytes:
                return
            if self._entries[name]["refs"] == 0 and name not in self._pinned:
                del self._entries[name]
                self.evictions += 1
