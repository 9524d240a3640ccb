"""chunk: a repository -> token-exact, entity-aligned, deduplicated, ranked chunks (JSONL)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from copilot_cli import __version__
from copilot_cli.chunking.dedup import dedupe, line_hashes, rolling_repeats
from copilot_cli.chunking.files import FileReport, chunk_file
from copilot_cli.chunking.packer import TokenCounter
from copilot_cli.chunking.registry import build_registry
from copilot_cli.chunking.walk import read_regular, walk
from copilot_cli.core.artifacts import atomic_write, canonical_json, write_bytes
from copilot_cli.core.errors import InputError
from copilot_cli.core.fingerprints import cache_dir, tokenizer_fingerprint

FORMAT = "copilot-opt.chunks"
FORMAT_VERSION = 1
CHUNKER_VERSION = "5"  # bump when chunk boundaries change, to invalidate caches


@dataclass(frozen=True)
class ChunkOptions:
    """Settings of chunk.

    Attributes:
        repo: the repository folder.
        out: the JSONL file to write.
        max_tokens: no chunk (scope header included) exceeds this many tokens.
        reserve: tokens kept free for the instruction header; max_tokens + reserve must fit
            the model's context.
        include, exclude: glob patterns on repository-relative paths.
        jobs: worker processes (default: all cores).
        registry: where to write the ranked chunk registry (JSON), or None.
        use_gitignore: honour .gitignore files.
        size_limit: files larger than this many bytes are skipped.
        repeat_window: lines per window of the rolling hash that finds repeated spans.
        use_cache: reuse per-file results keyed by content hash and options.
        follow_symlinks: follow links whose resolved path is inside the repository and not
            ignored (off: links are skipped, as git stores them as paths, not content).
    """

    repo: Path
    out: Path
    max_tokens: int = 384
    reserve: int = 128
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    jobs: int | None = None
    registry: Path | None = None
    use_gitignore: bool = True
    size_limit: int = 1_000_000
    repeat_window: int = 8
    use_cache: bool = True
    follow_symlinks: bool = False

    def __post_init__(self) -> None:
        if not self.repo.exists():
            raise InputError("repository folder does not exist", where=str(self.repo))
        if not self.repo.is_dir():
            raise InputError("expected a repository folder, found a file", where=str(self.repo))
        if self.max_tokens < 1:
            raise InputError("must be at least 1", where="--max-tokens")
        if self.reserve < 0:
            raise InputError("must be 0 or more", where="--reserve")
        if self.jobs is not None and self.jobs < 1:
            raise InputError("must be at least 1", where="--jobs")


@dataclass
class ChunkResult:
    out: Path
    summary: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


_worker: dict[str, Any] = {}


def _init_worker(tokenizer: Any) -> None:
    _worker["counter"] = TokenCounter(tokenizer)


def _chunk_one(job: tuple[str, str, int]) -> dict[str, Any]:
    real, rel, budget = job
    try:
        data = read_regular(real)
    except OSError as exc:
        return {"path": rel, "error": exc.strerror or str(exc)}
    report = chunk_file(data, rel, _worker["counter"], budget)
    return {"path": rel, "report": report, "lines": line_hashes(data)}


def _cache_key(data: bytes, rel: str, options_key: str) -> str:
    digest = hashlib.sha256(data)
    digest.update(f"|{rel}|{options_key}".encode())
    return digest.hexdigest()


def _report_to_json(report: FileReport) -> dict[str, Any]:
    return {
        "path": report.path,
        "language": report.language,
        "mode": report.mode,
        "parse_error": report.parse_error,
        "non_utf8": report.non_utf8,
        "chunks": [c.to_dict() for c in report.chunks],
    }


def chunk_repository(
    options: ChunkOptions, tokenizer: Any, context_length: int | None = None
) -> ChunkResult:
    """Walk, chunk, deduplicate and rank a repository; write the JSONL (and registry).

    Raises:
        InputError: missing repository, a budget below 1, or max_tokens + reserve beyond the
            model's context.
    """
    started = time.perf_counter()
    if context_length is not None and options.max_tokens + options.reserve > context_length:
        raise InputError(
            f"--max-tokens {options.max_tokens} + --reserve {options.reserve} "
            f"exceed the model's context of {context_length}",
            where="--max-tokens",
        )
    tok_fp = tokenizer_fingerprint(tokenizer)
    options_key = f"{CHUNKER_VERSION}|{tok_fp}|{options.max_tokens}"
    walked = walk(
        options.repo,
        use_gitignore=options.use_gitignore,
        include=options.include,
        exclude=options.exclude,
        size_limit=options.size_limit,
        follow_symlinks=options.follow_symlinks,
    )
    cache = cache_dir() / "chunks"
    results: dict[str, dict[str, Any]] = {}
    contents: dict[str, int] = {}  # sizes only: file bytes are not kept in memory
    pending: list[tuple[str, str, int]] = []
    keys: dict[str, str] = {}
    cache_hits = 0
    for real, rel in walked.files:
        try:
            data = read_regular(real)
        except OSError:
            walked.skip("unreadable", rel)
            continue
        contents[rel] = len(data)
        keys[rel] = _cache_key(data, rel, options_key)
        cached = cache / f"{keys[rel]}.json"
        if options.use_cache and cached.is_file():
            try:
                results[rel] = json.loads(cached.read_text(encoding="utf-8"))
                cache_hits += 1
                continue
            except ValueError:
                pass
        pending.append((str(real), rel, options.max_tokens))

    jobs = options.jobs or os.cpu_count() or 1
    if pending:
        if jobs > 1 and len(pending) > 8:
            with ProcessPoolExecutor(jobs, initializer=_init_worker, initargs=(tokenizer,)) as pool:
                outcomes = list(pool.map(_chunk_one, pending, chunksize=8))
        else:
            _init_worker(tokenizer)
            outcomes = [_chunk_one(job) for job in pending]
        for outcome in outcomes:
            rel = outcome["path"]
            if "error" in outcome:
                walked.skip("unreadable", rel)
                contents.pop(rel, None)
                continue
            results[rel] = _report_to_json(outcome["report"])
            results[rel]["lines"] = outcome["lines"]
            if options.use_cache:
                with contextlib.suppress(OSError):
                    write_bytes(
                        cache / f"{keys[rel]}.json", json.dumps(results[rel]).encode("utf-8")
                    )

    chunks = []
    modes = {}
    for rel in sorted(results):
        report = results[rel]
        modes[rel] = report["mode"]
        for chunk in report["chunks"]:
            chunk = dict(chunk)
            chunk["id"] = chunk["sha256"][:16]
            chunks.append(chunk)
    written, folded, near = dedupe(chunks)
    repeats = rolling_repeats(
        {rel: tuple(r["lines"]) for rel, r in results.items()}, options.repeat_window
    )
    header = {
        "type": "header",
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "copilot_opt_version": __version__,
        "chunker_version": CHUNKER_VERSION,
        "tokenizer_fingerprint": tok_fp,
        "max_tokens": options.max_tokens,
        "reserve": options.reserve,
        "repository": options.repo.name,
    }
    with atomic_write(options.out) as handle:
        handle.write((json.dumps(header, sort_keys=True) + "\n").encode("utf-8"))
        for chunk in written:
            record = {k: v for k, v in chunk.items() if k != "syntax_hash"}
            record["type"] = "chunk"
            handle.write(
                (json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
            )
    if options.registry is not None:
        registry = {
            "format": "copilot-opt.chunk-registry",
            "format_version": 1,
            "tokenizer_fingerprint": tok_fp,
            "max_tokens": options.max_tokens,
            "chunks": build_registry(written, modes),
            "repeated_spans": [{"lines": r.lines, "locations": r.locations} for r in repeats],
        }
        write_bytes(options.registry, canonical_json(registry).encode("utf-8"))
    warnings = []
    if not results:
        warnings.append(f"{options.repo}: no files to chunk (empty repository or all skipped)")
    languages: dict[str, int] = {}
    for report in results.values():
        languages[report["language"]] = languages.get(report["language"], 0) + 1
    summary = {
        "files": len(results),
        "chunks_written": len(written),
        "chunks_total": len(chunks),
        "exact_duplicates_folded": folded,
        "near_duplicates_marked": near,
        "repeated_spans": len(repeats),
        "languages": dict(sorted(languages.items())),
        "fallback_files": sorted(r for r, rep in results.items() if rep["mode"] == "fallback"),
        "parse_errors": sorted(r for r, rep in results.items() if rep["parse_error"]),
        "non_utf8_files": sorted(r for r, rep in results.items() if rep["non_utf8"]),
        "skipped": dict(sorted(walked.skipped.items())),
        "skipped_paths": {k: v[:20] for k, v in sorted(walked.skipped_paths.items())},
        "max_chunk_tokens": max((c["token_count"] for c in chunks), default=0),
        "bytes": sum(contents.values()),
        "cache_hits": cache_hits,
        "seconds": round(time.perf_counter() - started, 3),
    }
    return ChunkResult(out=options.out, summary=summary, warnings=warnings)
