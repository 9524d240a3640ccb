"""Chunking as units of work, the same in this process, a worker process or a Ray worker
(core/executor.py runs them): a batch of files (their bytes travel with the batch, so a worker
needs no view of the caller's disk), the per-worker token counter, a file's result as cached
and merged, and the cache entry format (a digest line, then the result).

A batch is a pure function of (tokenizer, files' bytes, budget), so one retried after a worker
died returns the same result. Each worker also keeps the per-file cache of its own machine: a
file it chunked before is served from there."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from copilot_cli.chunking.dedup import line_hashes
from copilot_cli.chunking.files import FileReport, chunk_file
from copilot_cli.chunking.packer import TokenCounter
from copilot_cli.chunking.walk import read_regular
from copilot_cli.core.artifacts import write_bytes
from copilot_cli.core.fingerprints import cache_dir

WORKER: dict[str, Any] = {}
BATCH_BYTES = 1 << 20  # at most about one second of chunking per unit on one core
MIN_BATCH_BYTES = 16 << 10  # below this, handing a unit over costs more than its work
BATCH_FILES = 256
BATCHES_PER_WORKER = 4  # small inputs still spread over every worker

Job = tuple[str, str, int]  # (real path, relative path, token budget)
Batch = list[tuple[str, bytes, int, str]]  # (relative path, bytes, budget, cache key or "")


def init_worker(tokenizer: Any) -> str:
    """A worker's state: its token counter (module-level: the chunker's functions read it);
    its machine's cache folder."""

    WORKER["counter"] = TokenCounter(tokenizer)
    WORKER["tokenizer"] = tokenizer
    return str(cache_dir() / "chunks")


def batches(
    jobs: list[Job], sizes: dict[str, int], workers: int, keys: Callable[[str], str]
) -> tuple[Iterator[Batch], list[dict[str, Any]]]:
    """`jobs` as batches of files read as they are handed out, and the list their unreadable
    files are added to (path and error) as that happens."""
    total = sum(sizes.get(job[1], 0) for job in jobs)
    target = max(MIN_BATCH_BYTES, min(BATCH_BYTES, total // (workers * BATCHES_PER_WORKER)))
    unreadable: list[dict[str, Any]] = []

    def read() -> Iterator[Batch]:
        batch: Batch = []
        size = 0
        for real, rel, budget in jobs:
            size += sizes.get(rel, 0)
            try:
                batch.append((rel, read_regular(real), budget, keys(rel)))
            except OSError as exc:
                unreadable.append({"path": rel, "error": exc.strerror or str(exc)})
            if size >= target or len(batch) >= BATCH_FILES:
                yield batch
                batch, size = [], 0
        if batch:
            yield batch

    return read(), unreadable


def chunk_batch(cache: str, files: Batch) -> list[dict[str, Any]]:
    """On a worker: chunk each (path, bytes, budget, cache key); its machine's cache first."""

    out = []
    for rel, data, budget, key in files:
        entry = Path(cache) / f"{key}.json" if key else None
        result = cache_entry(entry) if entry is not None and entry.is_file() else None
        if result is None:
            result = chunk_bytes(data, rel, budget)
            if entry is not None:
                with contextlib.suppress(OSError):
                    write_bytes(entry, cache_bytes(result))
        out.append({"path": rel, "result": result})
    return out


def chunk_bytes(data: bytes, rel: str, budget: int) -> dict[str, Any]:
    """One file's chunks and line hashes, as cached and merged (the worker's counter)."""
    result = report_to_json(chunk_file(data, rel, WORKER["counter"], budget))
    result["lines"] = line_hashes(data)
    return result


def report_to_json(report: FileReport) -> dict[str, Any]:
    return {
        "path": report.path,
        "language": report.language,
        "mode": report.mode,
        "parse_error": report.parse_error,
        "non_utf8": report.non_utf8,
        "chunks": [c.to_dict() for c in report.chunks],
    }


def cache_bytes(result: dict[str, Any]) -> bytes:
    """A cache entry: a line with the sha256 of the body, then the result as compact JSON
    (sealed without re-serializing: checking an entry is one hash and one parse)."""
    body = orjson.dumps(result)
    return hashlib.sha256(body).hexdigest().encode() + b"\n" + body


def cache_entry(path: Path) -> dict[str, Any] | None:
    """A cached file result, or None when the entry is missing, damaged or edited."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    digest, _, body = data.partition(b"\n")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        return None
    try:
        entry = orjson.loads(body)
    except (orjson.JSONDecodeError, RecursionError):
        return None
    return entry if isinstance(entry, dict) else None
