"""A cache whose entries expire a fixed time after they were written."""

from __future__ import annotations

import heapq
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple


class TTLCache:
    """Thread-safe cache with per-entry time-to-live and lazy plus periodic expiry.

    Expired entries are dropped when they are read (lazy expiry) and by ``sweep``, which
    pops entries from a heap ordered by deadline, so a sweep costs O(expired log n).
    """

    def __init__(self, default_ttl: float = 60.0, clock: Callable[[], float] = time.monotonic):
        if default_ttl <= 0:
            raise ValueError("default_ttl must be positive")
        self.default_ttl = default_ttl
        self._clock = clock
        self._lock = threading.RLock()
        self._values: Dict[str, Tuple[Any, float]] = {}
        self._deadlines: List[Tuple[float, str]] = []
        self.expired_count = 0

    def set(self, key: str, value: Any, ttl: Optional[float] = None) -> None:
        """Store ``value`` under ``key`` for ``ttl`` seconds (default: the cache's TTL)."""
        ttl = self.default_ttl if ttl is None else ttl
        if ttl <= 0:
            raise ValueError(f"ttl must be positive, got {ttl}")
        deadline = self._clock() + ttl
        with self._lock:
            self._values[key] = (value, deadline)
            heapq.heappush(self._deadlines, (deadline, key))

    def get(self, key: str, default: Any = None) -> Any:
        """Return the live value for ``key`` or ``default`` when absent or expired."""
        with self._lock:
            item = self._values.get(key)
            if item is None:
                return default
            value, deadline = item
            if deadline <= self._clock():
                del self._values[key]
                self.expired_count += 1
                return default
            return value

    def ttl(self, key: str) -> Optional[float]:
        """Seconds left for ``key``, or None when it is absent or expired."""
        with self._lock:
            item = self._values.get(key)
            if item is None:
                return None
            remaining = item[1] - self._clock()
            return remaining if remaining > 0 else None

    def sweep(self, limit: Optional[int] = None) -> int:
        """Drop expired entries (at most ``limit``); return how many were dropped."""
        dropped = 0
        now = self._clock()
        with self._lock:
            while self._deadlines and self._deadlines[0][0] <= now:
                if limit is not None and dropped >= limit:
                    break
                deadline, key = heapq.heappop(self._deadlines)
                item = self._values.get(key)
                # The heap may hold stale deadlines for keys that were rewritten later.
                if item is not None and item[1] == deadline:
                    del self._values[key]
                    dropped += 1
            self.expired_count += dropped
            if len(self._deadlines) > 4 * max(1, len(self._values)):
                self._compact_heap()
        return dropped

    def _compact_heap(self) -> None:
        self._deadlines = [(deadline, key) for key, (_, deadline) in self._values.items()]
        heapq.heapify(self._deadlines)

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for _, deadline in self._values.values() if deadline > self._clock())


class SweeperThread(threading.Thread):
    """Background thread that sweeps a TTLCache every ``interval`` seconds until stopped."""

    def __init__(self, cache: TTLCache, interval: float = 1.0, batch: int = 1000):
        super().__init__(daemon=True, name="ttl-sweeper")
        self.cache = cache
        self.interval = interval
        self.batch = batch
        self._stop_event = threading.Event()
        self.sweeps = 0

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.cache.sweep(limit=self.batch)
            self.sweeps += 1

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_event.set()
        self.join(timeout)
