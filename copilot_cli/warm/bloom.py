"""A Bloom filter for the lazily loaded tier: "certainly not stored" without touching disk.

m bits and k hash functions are chosen from the expected item count n and the false-positive
rate p (m = -n ln p / ln² 2, k = m/n ln 2). Positions come from sha256 (double hashing), so a
filter built on one machine answers the same on every other.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Iterable
from typing import Any

MAX_HASHES = 64  # k = -log2(p): 64 is a false-positive rate of 5e-20, far below any use


class BloomFilter:
    def __init__(self, bits: int, hashes: int, data: bytes | None = None) -> None:
        self.bits = max(8, bits)
        self.hashes = max(1, hashes)
        self.array = bytearray(data) if data is not None else bytearray((self.bits + 7) // 8)

    @classmethod
    def for_items(cls, items: Iterable[str], fp_rate: float) -> BloomFilter:
        items = list(items)
        n = max(1, len(items))
        bits = math.ceil(-n * math.log(fp_rate) / (math.log(2) ** 2))
        bloom = cls(bits, min(MAX_HASHES, round(bits / n * math.log(2))))
        for item in items:
            bloom.add(item)
        return bloom

    def _positions(self, item: str) -> list[int]:
        digest = hashlib.sha256(item.encode("utf-8")).digest()
        h1 = int.from_bytes(digest[:8], "little")
        h2 = int.from_bytes(digest[8:16], "little") | 1
        return [(h1 + i * h2) % self.bits for i in range(self.hashes)]

    def add(self, item: str) -> None:
        for p in self._positions(item):
            self.array[p >> 3] |= 1 << (p & 7)

    def __contains__(self, item: str) -> bool:
        return all(self.array[p >> 3] >> (p & 7) & 1 for p in self._positions(item))

    def to_dict(self) -> dict[str, Any]:
        return {
            "bits": self.bits,
            "hashes": self.hashes,
            "data": base64.b64encode(bytes(self.array)).decode("ascii"),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BloomFilter:
        raw = base64.b64decode(data["data"], validate=True)
        hashes = int(data["hashes"])
        if not 1 <= hashes <= MAX_HASHES:  # every lookup computes this many positions
            raise ValueError(f"filter hashes {hashes} is outside [1, {MAX_HASHES}]")
        bloom = cls(int(data["bits"]), hashes, raw)
        if len(raw) != (bloom.bits + 7) // 8:
            raise ValueError("filter data does not match its size")
        return bloom
