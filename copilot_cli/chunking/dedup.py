"""Deduplication: exact (same bytes), near (same syntax tree: whitespace and comments aside),
and long repeated spans across files found with a rolling hash over a sliding window of lines.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

_BASE = 1_000_003
_MOD = (1 << 61) - 1


@dataclass
class RepeatedSpan:
    lines: int
    locations: list[dict[str, Any]]


def rolling_repeats(files: dict[str, bytes], window: int = 8) -> list[RepeatedSpan]:
    """Spans of at least `window` non-blank lines (whitespace-normalised) that occur in more
    than one place. A Rabin-Karp rolling hash over line hashes finds candidate windows in one
    pass per file; candidates are confirmed by comparing the lines and merged into maximal runs.
    """
    lines_of: dict[str, list[tuple[int, int]]] = {}  # path -> [(line number, line hash)]
    where: dict[int, list[tuple[str, int]]] = defaultdict(list)
    top = pow(_BASE, window - 1, _MOD)
    for path, data in files.items():
        entries = []
        for number, line in enumerate(data.split(b"\n"), start=1):
            norm = b" ".join(line.split())
            if norm:
                digest = hashlib.blake2b(norm, digest_size=8).digest()
                entries.append((number, int.from_bytes(digest, "little") >> 4))
        lines_of[path] = entries
        rolling = 0
        for index, (_, h) in enumerate(entries):
            if index >= window:
                rolling = (rolling - entries[index - window][1] * top) % _MOD
            rolling = (rolling * _BASE + h) % _MOD
            if index >= window - 1:
                where[rolling].append((path, index - window + 1))
    runs: dict[tuple, RepeatedSpan] = {}
    for hits in where.values():
        if len({p for p, _ in hits}) < 2:  # across files
            continue
        first_path, first_index = hits[0]
        reference = [h for _, h in lines_of[first_path][first_index : first_index + window]]
        same = [(p, i) for p, i in hits if [h for _, h in lines_of[p][i : i + window]] == reference]
        if len({p for p, _ in same}) < 2:
            continue
        key = tuple((p, i) for p, i in same)
        runs[key] = RepeatedSpan(
            window,
            [
                {
                    "path": p,
                    "start_line": lines_of[p][i][0],
                    "end_line": lines_of[p][i + window - 1][0],
                }
                for p, i in same
            ],
        )
    return _merge(list(runs.values()))


def _merge(spans: list[RepeatedSpan]) -> list[RepeatedSpan]:
    """Merge overlapping windows that move together into maximal repeated runs."""
    spans.sort(key=lambda s: [(loc["path"], loc["start_line"]) for loc in s.locations])
    merged: list[RepeatedSpan] = []
    for span in spans:
        if (
            merged
            and len(merged[-1].locations) == len(span.locations)
            and all(
                a["path"] == b["path"] and b["start_line"] <= a["end_line"] + 1
                for a, b in zip(merged[-1].locations, span.locations, strict=True)
            )
        ):
            last = merged[-1]
            for a, b in zip(last.locations, span.locations, strict=True):
                a["end_line"] = max(a["end_line"], b["end_line"])
            last.lines = last.locations[0]["end_line"] - last.locations[0]["start_line"] + 1
        else:
            merged.append(span)
    return merged


def dedupe(chunks: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int, int]:
    """Emit exact duplicates once (with every location) and mark near-duplicates.

    Returns (chunks to write, exact duplicates folded, near-duplicates marked).
    """
    by_sha: dict[str, dict[str, Any]] = {}
    by_syntax: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    folded = near = 0
    for chunk in chunks:
        location = {
            k: chunk[k] for k in ("path", "start_line", "end_line", "start_byte", "end_byte")
        }
        first = by_sha.get(chunk["sha256"])
        if first is not None:
            first["locations"].append(location)
            folded += 1
            continue
        chunk["locations"] = [location]
        by_sha[chunk["sha256"]] = chunk
        original = by_syntax.get(chunk["syntax_hash"])
        if original is not None:
            chunk["near_duplicate_of"] = original
            near += 1
        else:
            by_syntax[chunk["syntax_hash"]] = chunk["id"]
        out.append(chunk)
    return out, folded, near
