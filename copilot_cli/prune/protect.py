"""Spans that pruning must never remove."""

from __future__ import annotations

import bisect
import re

from copilot_cli.core.errors import InputError
from copilot_cli.core.options import OptionError
from copilot_cli.core.regexes import bounded

NUMBERS = re.compile(r"(?<![\w.])[-+]?(?:0[xob][0-9a-fA-F_]+|\d[\d_]*(?:\.\d+)?(?:e[-+]?\d+)?)")
NEGATIONS = re.compile(
    r"\b(?:not|no|never|none|nothing|neither|nor|without|cannot|isn't|"
    r"aren't|wasn't|weren't|don't|doesn't|didn't|won't|can't|shouldn't|"
    r"mustn't)\b|!=|!(?!=)|\bn't\b",
    re.IGNORECASE,
)
NEWLINES = re.compile(r"\n")  # prose keeps its line structure
PROSE_NAMES = re.compile(
    r"`+[^`]*?`+"  # inline code
    r"|\bhttps?://[^\s<>\"')\]]+"  # URLs
    r"|\b[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)+"  # capitalised multi-word names
    r"|\b[a-z]+(?:_[a-z0-9]+)+\b|\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z]+[A-Z]\w*\b"  # identifiers
)


def user_spans(text: str, patterns: tuple[str, ...]) -> list[tuple[int, int]]:
    """Spans of the user's `--protect` patterns, each run with bounded work (core.regexes)."""
    spans = []
    for pattern in patterns:
        try:
            spans += [s for s in bounded(pattern, "protect").spans(text) if s[1] > s[0]]
        except InputError as exc:  # does not compile, or ran past its deadline
            raise OptionError("protect", exc.message) from None
    return spans


def spans_of(text: str, patterns: list[re.Pattern]) -> list[tuple[int, int]]:
    """Spans of our own patterns (written to run in linear time)."""
    return [m.span() for p in patterns for m in p.finditer(text) if m.end() > m.start()]


def mark(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[bool]:
    """True for every token overlapping one of `spans` (character offsets)."""

    spans = sorted(spans)
    starts = [s for s, _ in spans]
    reach, best = [], -1
    for _, end in spans:
        best = max(best, end)
        reach.append(best)
    marked = []
    for start, end in offsets:
        index = bisect.bisect_left(starts, end) - 1
        marked.append(index >= 0 and reach[index] > start)
    return marked


def contained(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[bool]:
    """True for every token lying entirely inside one of `spans`."""

    spans = sorted(spans)
    starts = [s for s, _ in spans]
    out = []
    for start, end in offsets:
        index = bisect.bisect_right(starts, start) - 1
        out.append(index >= 0 and spans[index][1] >= end and end > start)
    return out
