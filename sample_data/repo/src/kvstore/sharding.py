"""Consistent hashing: map keys to shards so that adding a shard moves few keys."""

from __future__ import annotations

import bisect
import hashlib
from typing import Dict, Iterable, List, Optional, Tuple


def stable_hash(data: bytes) -> int:
    """64-bit hash that is the same in every process (unlike the built-in hash)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


class HashRing:
    """A ring of virtual nodes; each shard owns ``replicas`` points on the ring."""

    def __init__(self, shards: Iterable[str] = (), replicas: int = 64) -> None:
        if replicas <= 0:
            raise ValueError("replicas must be positive")
        self.replicas = replicas
        self._points: List[int] = []
        self._owners: Dict[int, str] = {}
        self._shards: set = set()
        for shard in shards:
            self.add(shard)

    def add(self, shard: str) -> None:
        if shard in self._shards:
            raise ValueError(f"shard {shard!r} is already on the ring")
        self._shards.add(shard)
        for replica in range(self.replicas):
            point = stable_hash(f"{shard}#{replica}".encode())
            # Two virtual nodes colliding is astronomically rare; keep the first owner.
            if point in self._owners:
                continue
            bisect.insort(self._points, point)
            self._owners[point] = shard

    def remove(self, shard: str) -> None:
        if shard not in self._shards:
            raise KeyError(shard)
        self._shards.discard(shard)
        keep = [p for p in self._points if self._owners[p] != shard]
        for point in set(self._points) - set(keep):
            del self._owners[point]
        self._points = keep

    def owner(self, key: bytes) -> str:
        if not self._points:
            raise LookupError("the ring has no shards")
        index = bisect.bisect(self._points, stable_hash(key)) % len(self._points)
        return self._owners[self._points[index]]

    def owners(self, key: bytes, count: int) -> List[str]:
        """The first ``count`` distinct shards clockwise from ``key`` (for replication)."""
        if count > len(self._shards):
            raise ValueError(f"asked for {count} owners but the ring has {len(self._shards)}")
        result: List[str] = []
        start = bisect.bisect(self._points, stable_hash(key))
        for step in range(len(self._points)):
            shard = self._owners[self._points[(start + step) % len(self._points)]]
            if shard not in result:
                result.append(shard)
                if len(result) == count:
                    break
        return result

    def balance(self, sample_keys: Iterable[bytes]) -> Dict[str, float]:
        """Share of ``sample_keys`` each shard owns."""
        counts: Dict[str, int] = {shard: 0 for shard in self._shards}
        total = 0
        for key in sample_keys:
            counts[self.owner(key)] += 1
            total += 1
        return {shard: count / total for shard, count in counts.items()} if total else {}


def plan_migration(
    old: HashRing, new: HashRing, keys: Iterable[bytes]
) -> List[Tuple[bytes, str, str]]:
    """Keys whose owner changes from ``old`` to ``new``: (key, from_shard, to_shard)."""
    moves = []
    for key in keys:
        before: Optional[str] = old.owner(key)
        after = new.owner(key)
        if before != after:
            moves.append((key, before, after))
    return moves
