"""What one pruning of a text is: the removed character intervals and the attempt they make
(shared by the pruner and the pattern search)."""

from __future__ import annotations

import bisect
from typing import NamedTuple


class Attempt(NamedTuple):
    """One pruning of the text: the output, its spans and token count."""

    text: str
    kept_spans: list[tuple[int, int]]
    removed_spans: list[tuple[int, int]]
    tokens: int
    lines: bool  # code: whole statements went
    parses: bool | None  # code: the head still parses (checked once, on the result); prose None


class Removed:
    """Disjoint sorted character intervals removed from a text."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def add(self, start: int, end: int) -> None:
        i = bisect.bisect_left(self.ends, start)
        j = bisect.bisect_right(self.starts, end)
        if i < j:
            start, end = min(start, self.starts[i]), max(end, self.ends[j - 1])
        self.starts[i:j] = [start]
        self.ends[i:j] = [end]

    def apply(self, text: str, lo: int, hi: int, extra: tuple[int, int] | None = None) -> str:
        """`text[lo:hi]` without the removed intervals (and without `extra`, if given)."""
        i = bisect.bisect_right(self.ends, lo)
        j = bisect.bisect_left(self.starts, hi)
        spans = list(zip(self.starts[i:j], self.ends[i:j], strict=True))
        if extra is not None and extra[0] < hi and extra[1] > lo:
            bisect.insort(spans, extra)
        pieces, previous = [], lo
        for start, end in spans:
            if start > previous:
                pieces.append(text[previous:start])
            previous = max(previous, end)
        if previous < hi:
            pieces.append(text[previous:hi])
        return "".join(pieces)


def spans(removed: Removed, length: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(kept, removed) character spans of a text of `length` after `removed`."""
    kept_spans, removed_spans, previous = [], [], 0
    for start, end in zip(removed.starts, removed.ends, strict=True):
        if start > previous:
            kept_spans.append((previous, start))
        removed_spans.append((start, end))
        previous = end
    if previous < length:
        kept_spans.append((previous, length))
    return kept_spans, removed_spans
