"""The serving side: load a stored prefix into a transformers cache, share prefixes, generate."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from copilot_cli.core import lazy, verified
from copilot_cli.core.errors import ArtifactError, FingerprintMismatch, InputError
from copilot_cli.core.fingerprints import model_fingerprint, tokenizer_fingerprint
from copilot_cli.core.models import DTYPES
from copilot_cli.core.safetensors_io import DIGEST_KEY, read_header
from copilot_cli.kv.format import (
    SEGMENTS_DIR,
    KVIndex,
    ModelGeometry,
    block_hashes,
    load_index,
    read_segment,
)
from copilot_cli.kv.geometry import model_geometry
from copilot_cli.kv.options import DEFAULT_MAX_BYTES
from copilot_cli.kv.store import SegmentStore

transformers = lazy.module("transformers")
cache_utils = lazy.module("transformers.cache_utils")


@dataclass(frozen=True)
class StoredPrefix:
    name: str
    token_ids: list[int]
    segments: list[str]


class KVCacheDir:
    """An opened KV folder (index read, checked and typed); segments are read on demand."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.index: KVIndex = load_index(self.path)

    @property
    def model_fingerprint(self) -> str:
        return self.index.model_fingerprint

    def names(self) -> list[str]:
        return sorted(self.index.prefixes)

    def prefix(self, name_or_token_ids: str | list[int]) -> StoredPrefix:
        """A stored prefix by name, or the longest stored prefix that `token_ids` starts with."""
        prefixes = self.index.prefixes
        if isinstance(name_or_token_ids, str):
            if name_or_token_ids not in prefixes:
                raise InputError(
                    f"no stored prefix named {name_or_token_ids!r} (stored: "
                    f"{', '.join(self.names())})",
                    where=str(self.path),
                )
            entry = prefixes[name_or_token_ids]
            return StoredPrefix(entry.name, list(entry.token_ids), list(entry.segments))
        ids = tuple(name_or_token_ids)
        best = None
        for entry in prefixes.values():
            stored = entry.token_ids
            if (
                len(stored) <= len(ids)
                and ids[: len(stored)] == stored
                and (best is None or len(stored) > len(best.token_ids))
            ):
                best = entry
        if best is None:
            raise InputError("no stored prefix matches the given token ids", where=str(self.path))
        return StoredPrefix(best.name, list(best.token_ids), list(best.segments))

    def segment_path(self, seg_hash: str) -> Path:
        return self.path / SEGMENTS_DIR / f"{seg_hash}.safetensors"


def check_model(kv_model_fp: str, model: Any, where: str) -> tuple[str, ModelGeometry]:
    expected = model_fingerprint(model)
    if kv_model_fp != expected:
        raise FingerprintMismatch("model", expected=expected, found=kv_model_fp, where=where)
    return expected, model_geometry(model)


def read_chain(
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
        stored = DTYPES.get(segment.metadata.get("dtype", ""))
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
    device = next(model.parameters()).device
    # Only sliding-window models need the config-aware layer types (and they are slower to set up).
    cache = (
        transformers.DynamicCache(config=model.config)
        if model_geometry(model).sliding_window
        else transformers.DynamicCache()
    )
    if not cache.layers:
        cache.layers.extend(cache_utils.DynamicLayer() for _ in keys)
    for index, (k, v) in enumerate(zip(keys, values, strict=True)):
        k = k.unsqueeze(0).to(device)
        v = v.unsqueeze(0).to(device)
        layer = cache.layers[index] if index < len(cache.layers) else None
        if layer is not None and type(layer) is cache_utils.DynamicLayer:
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
        check_model(kv.model_fingerprint, model, str(path))
        stored = kv.prefix(name_or_token_ids)
        paths = [kv.segment_path(h) for h in stored.segments]
    elif path.is_file():
        stored, paths = None, _chain_from_file(path)
    else:
        raise InputError("KV file or folder does not exist", where=str(path))
    token_ids, keys, values = read_chain(paths, model, tokenizer)
    if stored is not None and token_ids != stored.token_ids:
        raise ArtifactError(
            f"segments of {stored.name!r} hold other tokens than its index entry", where=str(path)
        )
    return build_cache(model, keys, values)


def _chain_from_file(path: Path) -> list[Path]:

    chain = [path]
    seen = {path.resolve()}
    while True:  # headers are not verified yet: a parent that leads back is a cycle, refused
        _, metadata = read_header(chain[0])
        parent = metadata.get("parent", "")
        if not parent:
            return chain
        parent_path = chain[0].parent / f"{parent}.safetensors"
        if not parent_path.is_file():
            raise ArtifactError(f"parent segment {parent[:16]} is missing", where=str(path))
        if parent_path.resolve() in seen:
            raise ArtifactError(
                f"segment {parent[:16]} is its own ancestor: the chain has a cycle",
                where=str(path),
            )
        seen.add(parent_path.resolve())
        chain.insert(0, parent_path)


class PrefixStore:
    """Loaded prefixes shared across requests: their segments held once each in a
    SegmentStore (a trunk shared by many prefixes is one copy), reference-counted while a
    request uses them, LRU-evicted by bytes over segments.

    `acquire` hands out a new DynamicCache per request whose layers hold the prefix's keys and
    values (the segments' own tensors when the prefix is one segment, else one joined copy for
    that request; appending creates new tensors, so requests never see each other's tokens).
    """

    def __init__(
        self,
        kv_dir: Path | str,
        model: Any,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        tokenizer: Any | None = None,
        plan: Any = None,
        request_log: Any = None,
    ) -> None:
        """`plan` (a `warm.Plan`: `read_plan(path)`, what `copilot-opt warm-plan` wrote): its
        L0 prefixes are loaded now and never evicted, its L1 prefixes by a background thread
        in priority order (requests never wait for it), and `get` consults its Bloom filter
        before reading any other prefix from disk. `request_log` (a `warm.RequestLog`): every
        `get` is appended to it, the input of `warm-plan`. Objects, not paths: kv does not
        read warm's files (warm reads kv's)."""
        self.kv = KVCacheDir(kv_dir)
        self.model = model
        self.tokenizer = tokenizer
        model_fp, geometry = check_model(self.kv.model_fingerprint, model, str(kv_dir))
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        self.segments = SegmentStore(
            self.kv.path,
            model_fingerprint=model_fp,
            tokenizer_fingerprint=tokenizer_fingerprint(tokenizer) if tokenizer else None,
            geometry=geometry,
            max_bytes=max_bytes,
            dtype=dtype,
        )
        self._lock = threading.Lock()
        self.hits = self.misses = self.bloom_skips = 0
        self._held: dict[str, int] = {}  # prefix -> requests using it
        self.plan = None
        self._planned: set[str] = set()  # L0 and L1: loaded on a miss without asking the filter
        self._warming: threading.Thread | None = None
        self._stop = threading.Event()
        self.request_log = request_log
        if plan is not None:
            self._use_plan(plan)

    @property
    def max_bytes(self) -> int:
        return self.segments.max_bytes

    @max_bytes.setter
    def max_bytes(self, value: int) -> None:
        self.segments.set_max_bytes(value)

    @property
    def evictions(self) -> int:
        return self.segments.evictions

    @property
    def bytes_held(self) -> int:
        return self.segments.bytes_held

    def resident(self, name: str) -> bool:
        """Every segment of prefix `name` is in memory."""
        return all(self.segments.holds(h) for h in self.kv.prefix(name).segments)

    def in_use(self) -> int:
        """Requests holding a prefix now (0 once every acquire was released)."""
        with self._lock:
            return sum(self._held.values())

    def _chain(self, name: str) -> list[tuple[str, str, int]]:
        """(segment, its parent, its start) of prefix `name`, from the index."""
        return [(s.hash, s.parent, s.start) for s in self.kv.index.chain(name)]

    def _use_plan(self, plan: Any) -> None:
        if isinstance(plan, (str, Path)) or isinstance(self.request_log, (str, Path)):
            raise TypeError("pass warm.read_plan(path) / warm.RequestLog(path), not a path")
        plan.check_fits(self.kv.index, str(self.kv.path))
        self.plan = plan
        stored = self.kv.index.prefixes
        for item in plan.in_tier("L0"):
            if item.id in stored:
                self._verify(item.id)
                for seg_hash, _, _ in self._chain(item.id):
                    self.segments.pin(seg_hash)
        l1 = [item.id for item in plan.in_tier("L1") if item.id in stored]
        self._planned = {item.id for item in plan.in_tier("L0")} | set(l1)
        self._warming = threading.Thread(target=self._warm, args=(l1,), daemon=True)
        self._warming.start()

    def _warm(self, names: list[str]) -> None:
        """Background pre-load of L1 within the budget (requests are served meanwhile; what
        it reads goes to the eviction end, so it never pushes out what requests use)."""
        for name in names:
            for seg_hash, parent, start in self._chain(name):
                if self._stop.is_set():
                    return
                if self.segments.holds(seg_hash):
                    continue
                size = self.kv.index.segments[seg_hash].bytes
                if self.segments.bytes_held + size > self.segments.max_bytes:
                    return
                self.segments.get(seg_hash, parent=parent, start=start, cold=True)

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
        planned = self.plan is None or name in self._planned
        if not planned and not self.resident(name) and not self.plan.may_be_stored("prefix", name):
            self.bloom_skips += 1
            return None
        return self.acquire(name)

    def _verify(self, name: str) -> list[Any]:
        """Acquire the segments of `name` (read and verified on first use) and check they hold
        its tokens and block hashes; released again if anything is off."""
        chain = self._chain(name)
        taken = []
        try:
            for seg_hash, parent, start in chain:
                taken.append(self.segments.acquire(seg_hash, parent=parent, start=start))
            stored = self.kv.prefix(name).token_ids
            if [t for s in taken for t in s.token_ids] != stored:
                raise ArtifactError(
                    f"segments of {name!r} hold other tokens than its index entry",
                    where=str(self.kv.path),
                )
            digests = (self.segments.model_fingerprint, *(s.metadata[DIGEST_KEY] for s in taken))
            if not verified.held("block-hashes", digests):
                check_block_hashes(taken, stored, self.segments.model_fingerprint)
                verified.hold("block-hashes", digests)
        except BaseException:
            for segment in taken:
                self.segments.release(segment.metadata["segment_hash"])
            raise
        return taken

    def tensors(self, name: str) -> tuple[list[int], list[torch.Tensor], list[torch.Tensor]]:
        """(token ids, keys, values) of `name` (shared with other requests when the prefix is
        one segment: never write into them); counted as `acquire`, so `release(name)` when
        done."""
        resident = self.resident(name)
        taken = self._verify(name)
        with self._lock:
            self.hits += resident
            self.misses += not resident
            self._held[name] = self._held.get(name, 0) + 1
        token_ids = [t for s in taken for t in s.token_ids]
        layers = range(len(taken[0].keys))
        keys = [_joined([s.keys[i] for s in taken]) for i in layers]
        values = [_joined([s.values[i] for s in taken]) for i in layers]
        return token_ids, keys, values

    def acquire(self, name: str) -> Any:
        """A per-request cache for prefix `name`; call `release(name)` when done."""
        _, keys, values = self.tensors(name)
        return build_cache(self.model, keys, values)

    def release(self, name: str) -> None:
        with self._lock:
            count = self._held.get(name, 0)
            if count == 0:
                return
            if count == 1:
                del self._held[name]
            else:
                self._held[name] = count - 1
        for seg_hash in self.kv.prefix(name).segments:
            self.segments.release(seg_hash)

    def token_ids(self, name: str) -> list[int]:
        return list(self.kv.prefix(name).token_ids)


def _joined(parts: list[torch.Tensor]) -> torch.Tensor:
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
