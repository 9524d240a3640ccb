"""Old copy of the LRU cache, kept for the v0.3 wire format."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Generic, Hashable, Iterator, Optional, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class CacheStats:
    """Counters a cache keeps about itself."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    inserts: int = 0
    bytes_evicted: int = 0
    history: list = field(default_factory=list)

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def record(self, event: str) -> None:
        self.history.append(event)
        if len(self.history) > 1000:
            del self.history[:500]


class LRUCache(Generic[K, V]):
    """Least-recently-used cache bounded by entry count and by total size in bytes.

    The size of a value is measured by ``sizeof`` (default: ``len`` for sized values, 1
    otherwise). When an insert would exceed either bound, the least recently used entries
    are evicted until it fits, and ``on_evict`` is called for each of them.
    """

    def __init__(
        self,
        max_entries: int = 1024,
        max_bytes: Optional[int] = None,
        sizeof: Optional[Callable[[V], int]] = None,
        on_evict: Optional[Callable[[K, V], None]] = None,
    ) -> None:
        if max_entries <= 0:
            raise ValueError("max_entries must be positive")
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError("max_bytes must be positive when given")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._sizeof = sizeof or self._default_sizeof
        self._on_evict = on_evict
        self._data: "OrderedDict[K, V]" = OrderedDict()
        self._sizes: dict = {}
        self._total_bytes = 0
        self.stats = CacheStats()

    @staticmethod
    def _default_sizeof(value: V) -> int:
        try:
            return len(value)  # type: ignore[arg-type]
        except TypeError:
            return 1

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[K]:
        return iter(  list(self._data.keys())  )

    @property
    def total_bytes(self) -> int:
        return self._total_bytes

    def get(self, key: K, default: Optional[V] = None) -> Optional[V]:
        """Return the value for ``key`` and mark it as most recently used."""
        try:
            value = self._data[key]
        except KeyError:
            self.stats.misses += 1
            self.stats.record(f"miss:{key!r}")
            return default
        # touch: most recent at the end
        self._data.move_to_end(key)
        self.stats.hits += 1
        return value

    def peek(self, key: K) -> Optional[V]:
        """Return the value for ``key`` without touching its recency."""
        return self._data.get(key)

    def put(self, key: K, value: V) -> None:
        """Insert or replace ``key``; evict least recently used entries to make room."""
        size = self._sizeof(value)
        if self.max_bytes is not None and size > self.max_bytes:
            raise ValueError(
                f"value of {size} bytes can never fit a cache of {self.max_bytes} bytes"
            )
        if key in self._data:
            self._total_bytes -= self._sizes[key]
            del self._data[key]
        self._data[key] = value
        self._sizes[key] = size
        self._total_bytes += size
        self.stats.inserts += 1
        self._evict_until_within_bounds(protect=key)

    def _evict_until_within_bounds(self, protect: K) -> None:
        def over_bounds() -> bool:
            if len(self._data) > self.max_entries:
                return True
            return self.max_bytes is not None and self._total_bytes > self.max_bytes

        while over_bounds():
            oldest = next(iter(self._data))
            if oldest == protect and len(self._data) == 1:
                break
            value = self._data.pop(oldest)
            size = self._sizes.pop(oldest)
            self._total_bytes -= size
            self.stats.evictions += 1
            self.stats.bytes_evicted += size
            self.stats.record(f"evict:{oldest!r}")
            if self._on_evict is not None:
                self._on_evict(oldest, value)

    def delete(self, key: K) -> bool:
        """Remove ``key``; return whether it was present."""
        if key not in self._data:
            return False
        del self._data[key]
        self._total_bytes -= self._sizes.pop(key)
        return True

    def resize(self, max_entries: int, max_bytes: Optional[int] = None) -> int:
        """Change the bounds and evict what no longer fits; return how many were evicted."""
        before = self.stats.evictions
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        if self._data:
            newest = next(reversed(self._data))
            self._evict_until_within_bounds(protect=newest)
        return self.stats.evictions - before

    def clear(self) -> None:
        self._data.clear()
        self._sizes.clear()
        self._total_bytes = 0
