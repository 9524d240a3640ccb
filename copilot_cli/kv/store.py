"""Verified segments of one KV folder held in host memory once each, reference-counted,
LRU-evicted by bytes.

What a server keeps between requests (the vLLM connector, and PrefixStore on the transformers
side): each segment is read and verified (format, fingerprints, geometry, dtype, checksum,
chain) once, then served from memory until the byte budget needs its room. A segment shared by
many prefixes (a template's trunk) is held once. Segments in use (`acquire`d and not yet
`release`d) and pinned ones are never evicted.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from copilot_cli.core.errors import ArtifactError
from copilot_cli.kv.format import ModelGeometry, SegmentData, read_segment
from copilot_cli.kv.options import DEFAULT_MAX_BYTES


class SegmentStore:
    def __init__(
        self,
        kv_dir: Path,
        *,
        model_fingerprint: str,
        tokenizer_fingerprint: str | None,
        geometry: ModelGeometry | None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        dtype: str | None = None,
    ) -> None:
        self.kv_dir = Path(kv_dir)
        self.model_fingerprint = model_fingerprint
        self.tokenizer_fingerprint = tokenizer_fingerprint
        self.geometry = geometry
        self.max_bytes = max_bytes
        self.dtype = dtype
        self._segments: OrderedDict[str, SegmentData] = OrderedDict()
        self._refs: dict[str, int] = {}
        self._pinned: set[str] = set()
        self._bytes = 0
        self._lock = threading.RLock()
        self.hits = self.misses = self.evictions = 0

    @property
    def bytes_held(self) -> int:
        return self._bytes

    def holds(self, seg_hash: str) -> bool:
        return seg_hash in self._segments

    def refs(self, seg_hash: str) -> int:
        return self._refs.get(seg_hash, 0)

    def path(self, seg_hash: str) -> Path:
        return self.kv_dir / "segments" / f"{seg_hash}.safetensors"

    def check(self, seg_hash: str, *, parent: str | None = None, start: int | None = None) -> None:
        """Read and verify `seg_hash` without keeping it (the scheduler side of a server)."""
        self._read(seg_hash, parent, start)

    def _read(self, seg_hash: str, parent: str | None, start: int | None) -> SegmentData:

        segment = read_segment(
            self.path(seg_hash),
            model_fingerprint=self.model_fingerprint,
            tokenizer_fingerprint=self.tokenizer_fingerprint,
            geometry=self.geometry,
        )
        if segment.metadata.get("segment_hash") != seg_hash:
            raise ArtifactError("holds another segment than its name says", where=str(segment.path))
        if (parent is not None and segment.parent != parent) or (
            start is not None and segment.start != start
        ):
            raise ArtifactError("does not chain to its parent", where=str(segment.path))
        if self.dtype is not None and segment.metadata.get("dtype") != self.dtype:
            raise ArtifactError(
                f"KV was computed in {segment.metadata.get('dtype')}, the model runs in "
                f"{self.dtype}",
                where=str(segment.path),
            )
        return segment

    def get(
        self,
        seg_hash: str,
        *,
        parent: str | None = None,
        start: int | None = None,
        cold: bool = False,
    ) -> Any:
        """The verified segment `seg_hash` (read on first use). `parent` and `start`, when
        given, must be what the segment says: the chain a prefix relies on. `cold`: a segment
        read now goes to the eviction end (a background pre-load must not push out what
        requests use).

        Raises:
            ArtifactError / FingerprintMismatch: a missing, corrupt or foreign segment.
        """
        with self._lock:
            segment = self._segments.get(seg_hash)
            if segment is not None:
                self.hits += 1
                if not cold:
                    self._segments.move_to_end(seg_hash)
                return segment
        segment = self._read(seg_hash, parent, start)
        with self._lock:
            if seg_hash in self._segments:  # another thread read it meanwhile
                return self._segments[seg_hash]
            self.misses += 1
            self._segments[seg_hash] = segment
            self._bytes += segment.nbytes
            self._segments.move_to_end(seg_hash, last=not cold)
            self._evict(keep=seg_hash)
        return segment

    def acquire(self, seg_hash: str, *, parent: str | None = None, start: int | None = None) -> Any:
        """`get`, and the segment is in use (never evicted) until `release(seg_hash)`."""
        while True:  # read outside the lock; counted only once it is resident
            segment = self.get(seg_hash, parent=parent, start=start)
            with self._lock:
                if self._segments.get(seg_hash) is segment:
                    self._refs[seg_hash] = self._refs.get(seg_hash, 0) + 1
                    return segment

    def release(self, seg_hash: str) -> None:
        with self._lock:
            count = self._refs.get(seg_hash, 0)
            if count <= 1:
                self._refs.pop(seg_hash, None)
            else:
                self._refs[seg_hash] = count - 1
            self._evict(keep=None)

    def pin(self, seg_hash: str) -> None:
        """Keep `seg_hash` resident for good (read now)."""
        self.get(seg_hash)
        with self._lock:
            self._pinned.add(seg_hash)

    def set_max_bytes(self, max_bytes: int) -> None:
        with self._lock:
            self.max_bytes = max_bytes
            self._evict(keep=None)

    def _evict(self, keep: str | None) -> None:
        if self._bytes <= self.max_bytes:
            return
        for name in list(self._segments):
            if self._bytes <= self.max_bytes:
                return
            if name != keep and name not in self._refs and name not in self._pinned:
                self._bytes -= self._segments.pop(name).nbytes
                self.evictions += 1
