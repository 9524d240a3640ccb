"""Verified segments of one KV folder held in host memory, LRU-evicted by bytes.

What a serving engine's connector keeps between requests: each segment is read and verified
(format, fingerprints, geometry, checksum, chain) once, then served from memory until the byte
budget needs its room. Segments in use are never evicted.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from copilot_cli.kv.format import ModelGeometry, SegmentData, read_segment

DEFAULT_MAX_BYTES = 2 << 30  # as the transformers-side PrefixStore


class SegmentStore:
    def __init__(
        self,
        kv_dir: Path,
        *,
        model_fingerprint: str,
        tokenizer_fingerprint: str | None,
        geometry: ModelGeometry | None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.kv_dir = Path(kv_dir)
        self.model_fingerprint = model_fingerprint
        self.tokenizer_fingerprint = tokenizer_fingerprint
        self.geometry = geometry
        self.max_bytes = max_bytes
        self._segments: OrderedDict[str, SegmentData] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = self.evictions = 0

    @property
    def bytes_held(self) -> int:
        return sum(s.nbytes for s in self._segments.values())

    def path(self, seg_hash: str) -> Path:
        return self.kv_dir / "segments" / f"{seg_hash}.safetensors"

    def check(self, seg_hash: str, *, parent: str | None = None, start: int | None = None) -> None:
        """Read and verify `seg_hash` without keeping it (the scheduler side of a server)."""
        self._read(seg_hash, parent, start)

    def _read(self, seg_hash: str, parent: str | None, start: int | None) -> SegmentData:
        from copilot_cli.core.errors import ArtifactError

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
        return segment

    def get(self, seg_hash: str, *, parent: str | None = None, start: int | None = None) -> Any:
        """The verified segment `seg_hash` (read on first use). `parent` and `start`, when
        given, must be what the segment says: the chain a prefix relies on.

        Raises:
            ArtifactError / FingerprintMismatch: a missing, corrupt or foreign segment.
        """
        with self._lock:
            segment = self._segments.get(seg_hash)
            if segment is not None:
                self.hits += 1
                self._segments.move_to_end(seg_hash)
                return segment
        segment = self._read(seg_hash, parent, start)
        with self._lock:
            self.misses += 1
            self._segments[seg_hash] = segment
            self._segments.move_to_end(seg_hash)
            self._evict(keep=seg_hash)
        return segment

    def _evict(self, keep: str) -> None:
        for name in list(self._segments):
            if self.bytes_held <= self.max_bytes:
                return
            if name != keep:
                del self._segments[name]
                self.evictions += 1
