"""Deduplication: exact (same bytes), near (same syntax tree: whitespace and comments aside),
and long repeated spans across files found with a rolling hash over a sliding window of lines.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from copilot_cli.core import lazy

np = lazy.module("numpy")

_BASE = 1_000_003


@dataclass
class RepeatedSpan:
    lines: int
    locations: list[dict[str, Any]]


def line_hashes(data: bytes) -> tuple[list[int], list[int]]:
    """(1-based line numbers, 64-bit hashes) of the non-blank lines, whitespace-normalised.

    The hash is crc32 and adler32 of the normalised line side by side: deterministic across
    processes (unlike Python's hash()) and cheap; cached with each file's chunks.
    """
    numbers, hashes = [], []
    for number, line in enumerate(data.split(b"\n"), start=1):
        norm = b" ".join(line.split())
        if norm:
            numbers.append(number)
            hashes.append((zlib.crc32(norm) << 32) | zlib.adler32(norm))
    return numbers, hashes


def rolling_repeats(
    lines: dict[str, tuple[list[int], list[int]]], window: int = 8
) -> list[RepeatedSpan]:
    """Spans of at least `window` non-blank lines (whitespace-normalised) that occur in more
    than one file. Every window of `window` consecutive line hashes gets a polynomial hash,
    computed for all windows at once; windows whose hashes meet in two or more files are
    confirmed line hash by line hash and merged into maximal runs.
    """
    paths = sorted(lines)
    arrays = {path: lines[path] for path in paths}
    windows = _window_keys([lines[path][1] for path in paths], window)
    if windows is None:
        return []
    key, owner, start = windows
    order = np.argsort(key, kind="stable")
    key, owner, start = key[order], owner[order], start[order]
    boundaries = np.flatnonzero(np.diff(key)) + 1
    runs: dict[tuple, RepeatedSpan] = {}
    group_starts, group_ends = np.r_[0, boundaries], np.r_[boundaries, len(key)]
    shared = (group_ends - group_starts) >= 2  # most windows occur once: skip them in bulk
    for group_start, group_end in zip(
        group_starts[shared].tolist(), group_ends[shared].tolist(), strict=True
    ):
        if len(set(owner[group_start:group_end].tolist())) < 2:
            continue
        hits = [
            (paths[int(o)], int(i))
            for o, i in zip(owner[group_start:group_end], start[group_start:group_end], strict=True)
        ]
        first_path, first_index = hits[0]
        reference = arrays[first_path][1][first_index : first_index + window]
        same = [(p, i) for p, i in hits if arrays[p][1][i : i + window] == reference]
        if len({p for p, _ in same}) < 2:
            continue
        runs[tuple(same)] = RepeatedSpan(
            window,
            [
                {"path": p, "start_line": arrays[p][0][i], "end_line": arrays[p][0][i + window - 1]}
                for p, i in same
            ],
        )
    return _merge(list(runs.values()))


def _window_keys(hashes_per_file: list[list[int]], window: int) -> Any:
    """(polynomial hash, file index, window start) of every window of `window` consecutive
    line hashes in every file, as three numpy arrays; None when no file is that long."""
    keys, owners, starts = [], [], []
    powers = [np.uint64(pow(_BASE, window - 1 - k, 1 << 64)) for k in range(window)]
    for file_index, hashes in enumerate(hashes_per_file):
        if len(hashes) < window:
            continue
        values = np.array(hashes, dtype=np.uint64)
        count = len(hashes) - window + 1
        with np.errstate(over="ignore"):
            combined = np.zeros(count, dtype=np.uint64)
            for k in range(window):
                combined += values[k : k + count] * powers[k]
        keys.append(combined)
        owners.append(np.full(count, file_index, dtype=np.int64))
        starts.append(np.arange(count, dtype=np.int64))
    if not keys:
        return None
    return np.concatenate(keys), np.concatenate(owners), np.concatenate(starts)


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
        syntax = chunk.pop("syntax_hash")  # spent here: written chunks do not carry it
        original = by_syntax.get(syntax)
        if original is not None:
            chunk["near_duplicate_of"] = original
            near += 1
        else:
            by_syntax[syntax] = chunk["id"]
        out.append(chunk)
    return out, folded, near
