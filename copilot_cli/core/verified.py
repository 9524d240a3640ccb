"""What this process has already verified, so a file read again unchanged is not re-checked.

A file's entry is keyed by its absolute path and holds its (device, inode, size, mtime, ctime)
at the time of the check: any write, truncation, rename over it or metadata change gives a new
key and the file is checked again in full. File timestamps are coarse (a kernel tick), so a
file changed within the last RACY_NS is never remembered: a write in the same tick as its
first check could keep the old stamps (git calls such entries "racily clean").

Checks that depend only on content already verified (a segment's hash against its tokens,
a chain's block hashes) are remembered by the content's digest: `held` / `hold`.

The memory is per process. `forget_verified` empties it (`inspect` starts with this, so it
always reads every byte).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

RACY_NS = 2_000_000_000

_lock = threading.Lock()
_entries: dict[tuple[str, str], tuple[tuple[int, ...], Any]] = {}
_held: dict[str, set[Any]] = {}
MAX_HELD = 100_000  # per kind; past it the memory starts over


def stat_key(stat: os.stat_result) -> tuple[int, ...]:
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def recall(kind: str, path: Path | str, stat: os.stat_result) -> Any | None:
    """The value remembered for `path` when it was checked with exactly this stat, else None."""
    entry = _entries.get((kind, str(Path(path).absolute())))
    if entry is not None and entry[0] == stat_key(stat):
        return entry[1]
    return None


def remember(kind: str, path: Path | str, stat: os.stat_result, value: Any) -> None:
    """Remember that `path` (with this stat) checked out, unless it changed too recently."""
    if time.time_ns() - max(stat.st_mtime_ns, stat.st_ctime_ns) <= RACY_NS:
        return
    with _lock:
        _entries[(kind, str(Path(path).absolute()))] = (stat_key(stat), value)


def forget(kind: str, path: Path | str) -> None:
    with _lock:
        _entries.pop((kind, str(Path(path).absolute())), None)


def held(kind: str, key: Any) -> bool:
    """Whether the check `kind` passed for `key` (digests of verified content) before."""
    return key in _held.get(kind, ())


def hold(kind: str, key: Any) -> None:
    """Remember that the check `kind` passed for `key`."""
    with _lock:
        seen = _held.setdefault(kind, set())
        if len(seen) >= MAX_HELD:
            seen.clear()
        seen.add(key)


def forget_verified() -> None:
    """Check every file in full from now on."""
    with _lock:
        _entries.clear()
        _held.clear()
