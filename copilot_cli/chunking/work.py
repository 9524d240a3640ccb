"""One file's chunking as a unit of work, the same in this process, a worker process or a Ray
worker: the per-worker token counter, the file's result as cached and merged, and the cache
entry format (a digest line, then the result)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson

from copilot_cli.chunking.dedup import line_hashes
from copilot_cli.chunking.files import FileReport, chunk_file
from copilot_cli.chunking.packer import TokenCounter
from copilot_cli.chunking.walk import read_regular

WORKER: dict[str, Any] = {}


def init_worker(tokenizer: Any) -> None:
    WORKER["counter"] = TokenCounter(tokenizer)


def chunk_one(job: tuple[str, str, int]) -> dict[str, Any]:
    real, rel, budget = job
    try:
        data = read_regular(real)
    except OSError as exc:
        return {"path": rel, "error": exc.strerror or str(exc)}
    return {"path": rel, "result": chunk_bytes(data, rel, budget)}


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
