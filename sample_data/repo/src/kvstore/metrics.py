"""In-process counters and histograms with a text exposition format."""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from typing import Dict, List, Sequence

DEFAULT_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, math.inf)


class Histogram:
    """Cumulative bucket counts plus sum and count, like a Prometheus histogram."""

    def __init__(self, buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        if list(buckets) != sorted(buckets):
            raise ValueError("buckets must be sorted")
        self.buckets = list(buckets)
        self.counts = [0] * len(self.buckets)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.buckets, value)
        self.counts[min(index, len(self.counts) - 1)] += 1
        self.total += value
        self.count += 1

    def quantile(self, q: float) -> float:
        """Upper bound of the bucket holding the ``q`` quantile (0 < q <= 1)."""
        if not 0 < q <= 1:
            raise ValueError("q must be in (0, 1]")
        if self.count == 0:
            return 0.0
        target = q * self.count
        running = 0
        for bound, count in zip(self.buckets, self.counts):
            running += count
            if running >= target:
                return bound
        return self.buckets[-1]


class Metrics:
    def __init__(self) -> None:
        self.counters: Dict[str, int] = defaultdict(int)
        self.histograms: Dict[str, Histogram] = {}

    def increment(self, name: str, amount: int = 1) -> None:
        self.counters[name] += amount

    def observe(self, name: str, value: float) -> None:
        if name not in self.histograms:
            self.histograms[name] = Histogram()
        self.histograms[name].observe(value)

    def lines(self) -> List[str]:
        out = [f"counter {name} {value}" for name, value in sorted(self.counters.items())]
        for name, hist in sorted(self.histograms.items()):
            out.append(f"histogram {name} count={hist.count} sum={hist.total:.6f} "
                       f"p50={hist.quantile(0.5)} p99={hist.quantile(0.99)}")
        return out
