"""chunk: a repository -> token-exact, entity-aligned, deduplicated, ranked chunks (JSONL)."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import time
from pathlib import Path
from typing import Any

# compact JSON at C speed: cache entries are read back, and the chunks file written, on every
# run (a cached re-run is mostly these)
import orjson

from copilot_cli import __version__
from copilot_cli.chunking.dedup import RepeatedSpan, dedupe, rolling_repeats
from copilot_cli.chunking.format import (
    FORMAT,
    FORMAT_VERSION,
    REGISTRY_FORMAT,
    REGISTRY_VERSION,
    chunks_digest,
)
from copilot_cli.chunking.options import ChunkOptions, ChunkResult, ChunkSummary
from copilot_cli.chunking.registry import build_registry
from copilot_cli.chunking.walk import read_regular, walk_all
from copilot_cli.chunking.work import batches, cache_bytes, cache_entry, chunk_batch, init_worker
from copilot_cli.core import lazy, progress
from copilot_cli.core.artifacts import (
    FINGERPRINT_SCHEME,
    atomic_write,
    canonical_json,
    sealed,
    write_bytes,
)
from copilot_cli.core.executor import Work, open_executor
from copilot_cli.core.fingerprints import cache_dir, tokenizer_fingerprint
from copilot_cli.core.locks import output_lock
from copilot_cli.core.models import context_length, default_model, load_tokenizer
from copilot_cli.core.options import OptionError
from copilot_cli.core.outputs import claim_file

transformers = lazy.module("transformers")

CHUNKER_VERSION = "5"  # bump when chunk boundaries change, to invalidate caches


def _cache_key(data: bytes, rel: str, options_key: str) -> str:
    digest = hashlib.sha256(data)
    digest.update(f"|{rel}|{options_key}".encode())
    return digest.hexdigest()


@contextlib.contextmanager
def _no_cyclic_gc():
    """A chunk run allocates millions of small dicts and lists (JSON entries, chunk records)
    and makes no reference cycles; the cyclic collector scanning them cost ~20% of a cached
    re-run. Reference counting still frees everything; the collector's state is restored."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def chunk_repository(options: ChunkOptions, tokenizer: Any | None = None) -> ChunkResult:
    """Walk, chunk, deduplicate and rank a repository; write the JSONL (and registry).
    Loads `options.tokenizer` (default: the default model's) when none is handed in.

    Raises:
        OptionError: max_tokens + reserve beyond the model's context, or a bad setting.
    """
    with _no_cyclic_gc():
        return _chunk_repository(options, tokenizer)


def _chunk_repository(options: ChunkOptions, tokenizer: Any | None) -> ChunkResult:
    started = time.perf_counter()
    claim_file(options.out, "out", fmt=FORMAT, label="chunks file")
    claim_file(options.registry, "registry", fmt=REGISTRY_FORMAT, label="chunk registry")
    with output_lock(options.out, "chunk", folder=False):  # the whole run: a second stops at once
        return _chunk_claimed(options, tokenizer, started)


def _chunk_claimed(options: ChunkOptions, tokenizer: Any | None, started: float) -> ChunkResult:
    if tokenizer is None:
        with progress.progress("loading tokenizer"):
            tokenizer = load_tokenizer(
                options.tokenizer or default_model(), allow_download=options.allow_download
            )
    limit = context_limit(getattr(tokenizer, "name_or_path", "") or options.tokenizer)
    if limit is not None and options.max_tokens + options.reserve > limit:
        raise OptionError(
            "max_tokens",
            f"max_tokens {options.max_tokens} + reserve {options.reserve} exceed the model's "
            f"context of {limit}",
        )
    tok_fp = tokenizer_fingerprint(tokenizer)
    walked = walk_all(options)
    where = options.repos[0] if len(options.repos) == 1 else f"{len(options.repos)} repositories"
    bar = progress.progress(f"chunking {where}") if options.ray is None else None
    with bar or contextlib.nullcontext():  # on Ray the cluster run draws its own bar
        run = _Run(options, tokenizer, f"{CHUNKER_VERSION}|{tok_fp}|{options.max_tokens}")
        run.collect(walked)
        run.chunk_pending(walked)
    chunks, modes = run.chunks()
    written, folded, near = dedupe(chunks)
    repeats = run.repeats(options.repeat_window)
    _write(options, tok_fp, written, modes, repeats)
    warnings = []
    if not run.results:
        warnings.append(f"{where}: no files to chunk (empty repository or all skipped)")
    counts = (len(written), len(chunks), folded, near, len(repeats))
    summary = _summary(run, walked, chunks, counts, time.perf_counter() - started)
    return ChunkResult(out=options.out, summary=summary, warnings=warnings)


def _summary(
    run: _Run,
    walked: Any,
    chunks: list[dict[str, Any]],
    counts: tuple[int, int, int, int, int],
    seconds: float,
) -> ChunkSummary:
    results = run.results
    languages: dict[str, int] = {}
    for report in results.values():
        languages[report["language"]] = languages.get(report["language"], 0) + 1
    written, total, folded, near, repeats = counts
    return ChunkSummary(
        files=len(results),
        chunks_written=written,
        chunks_total=total,
        exact_duplicates_folded=folded,
        near_duplicates_marked=near,
        repeated_spans=repeats,
        languages=dict(sorted(languages.items())),
        fallback_files=sorted(r for r, rep in results.items() if rep["mode"] == "fallback"),
        parse_errors=sorted(r for r, rep in results.items() if rep["parse_error"]),
        non_utf8_files=sorted(r for r, rep in results.items() if rep["non_utf8"]),
        skipped=dict(sorted(walked.skipped.items())),
        skipped_paths={k: v[:20] for k, v in sorted(walked.skipped_paths.items())},
        max_chunk_tokens=max((c["token_count"] for c in chunks), default=0),
        bytes=sum(run.sizes.values()),
        cache_hits=run.cache_hits,
        seconds=round(seconds, 3),
    )


def context_limit(source: str) -> int | None:
    """The model's context when `source` is a model folder (a bare tokenizer has none)."""
    config = Path(source or default_model()) / "config.json"
    if not config.is_file():
        return None
    try:
        return context_length(
            transformers.AutoConfig.from_pretrained(config.parent, local_files_only=True)
        )
    except Exception:  # a tokenizer-only folder or an unknown config: no context check
        return None


class _Run:
    """One chunk run: which files come from the cache, which are chunked, and the results."""

    def __init__(self, options: ChunkOptions, tokenizer: Any, options_key: str) -> None:
        self.options = options
        self.tokenizer = tokenizer
        self.options_key = options_key
        self.cache = cache_dir() / "chunks"
        self.results: dict[str, dict[str, Any]] = {}
        self.sizes: dict[str, int] = {}  # sizes only: file bytes are not kept in memory
        self.keys: dict[str, str] = {}
        self.pending: list[tuple[str, str, int]] = []
        self.cache_hits = 0

    def collect(self, walked: Any) -> None:
        """Results of unchanged files from the cache; the rest queued."""
        for real, rel in walked.files:
            try:
                data = read_regular(real)
            except OSError:
                walked.skip("unreadable", rel)
                continue
            self.sizes[rel] = len(data)
            self.keys[rel] = _cache_key(data, rel, self.options_key)
            entry = self._cached(f"{self.keys[rel]}.json")
            if entry is not None:
                self.results[rel] = entry
                self.cache_hits += 1
                continue
            self.pending.append((str(real), rel, self.options.max_tokens))

    def chunk_pending(self, walked: Any) -> None:
        """Chunk the queued files (in batches, largest files first: in worker processes when
        there are enough, or on a Ray cluster) and cache them."""
        if not self.pending:
            return
        for outcome in self._outcomes():
            rel = outcome["path"]
            if "error" in outcome:
                walked.skip("unreadable", rel)
                self.sizes.pop(rel, None)
                continue
            self.results[rel] = outcome["result"]
            entry = self.cache / f"{self.keys[rel]}.json"
            if self.options.use_cache and not entry.is_file():
                with contextlib.suppress(OSError):
                    write_bytes(entry, cache_bytes(self.results[rel]))

    def _outcomes(self) -> list[dict[str, Any]]:
        jobs = self.options.jobs or os.cpu_count() or 1
        order = sorted(self.pending, key=lambda job: (-self.sizes[job[1]], job[1]))
        keys = (lambda rel: self.keys[rel]) if self.options.use_cache else (lambda _rel: "")
        where = "on Ray" if self.options.ray is not None else "here"
        with open_executor(self.options.ray, jobs if len(order) > 8 else 1) as executor:
            units, unreadable = batches(order, self.sizes, executor.workers(), keys)
            work = Work(
                f"chunking {len(order)} files {where}",
                units,
                init_worker,
                chunk_batch,
                (self.tokenizer,),
                weight=lambda batch: float(sum(len(f[1]) for f in batch)),
                total=float(sum(self.sizes[job[1]] for job in order)),
            )
            outcomes = [outcome for batch in executor.map(work) for outcome in batch]
        return outcomes + unreadable

    def _cached(self, name: str) -> dict[str, Any] | None:
        """The cache entry `name`, when caching is on and the entry is there and intact (a
        damaged or edited entry is redone, never used)."""
        entry = self.cache / name
        if not self.options.use_cache or not entry.is_file():
            return None
        return cache_entry(entry)

    def repeats(self, window: int) -> list[RepeatedSpan]:
        """Line runs repeated across files; the same files (every cache key) read them back
        from the cache instead of hashing every window of the repository again."""
        names = "\n".join(f"{rel}\0{self.keys[rel]}" for rel in sorted(self.results))
        key = hashlib.sha256(f"repeats|{window}|{names}".encode()).hexdigest()
        entry = self.cache / f"repeats-{key}.json"
        cached = self._cached(entry.name)
        if cached is not None and isinstance(cached.get("spans"), list):
            return [RepeatedSpan(span["lines"], span["locations"]) for span in cached["spans"]]
        spans = rolling_repeats({rel: tuple(r["lines"]) for rel, r in self.results.items()}, window)
        if self.options.use_cache:
            body = {"spans": [{"lines": s.lines, "locations": s.locations} for s in spans]}
            with contextlib.suppress(OSError):
                write_bytes(entry, cache_bytes(body))
        return spans

    def chunks(self) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """Every chunk in path order (with its id), and each file's mode."""
        chunks, modes = [], {}
        for rel in sorted(self.results):
            report = self.results[rel]
            modes[rel] = report["mode"]
            for chunk in report["chunks"]:
                chunk = dict(chunk)
                chunk["id"] = chunk["sha256"][:16]
                chunks.append(chunk)
        return chunks, modes


def _write(
    options: ChunkOptions,
    tok_fp: str,
    written: list[dict[str, Any]],
    modes: dict[str, str],
    repeats: list[Any],
) -> None:
    """The chunks JSONL (a header line, then one chunk per line) and the registry."""
    header = {
        "type": "header",
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "copilot_opt_version": __version__,
        "chunker_version": CHUNKER_VERSION,
        "tokenizer_fingerprint": tok_fp,
        "fingerprint_scheme": FINGERPRINT_SCHEME,
        "max_tokens": options.max_tokens,
        "reserve": options.reserve,
    }
    names = [repo.name for repo in options.repos]
    if len(names) == 1:
        header["repository"] = names[0]
    else:
        header["repositories"] = names
    option = orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
    lines = []
    for chunk in written:  # this run's own records: marked in place, not copied
        chunk["type"] = "chunk"
        lines.append(orjson.dumps(chunk, option=option))
    header["digest"] = chunks_digest(header, lines)
    registry = None
    if options.registry is not None:
        registry = {
            "format": REGISTRY_FORMAT,
            "format_version": REGISTRY_VERSION,
            "tokenizer_fingerprint": tok_fp,
            "fingerprint_scheme": FINGERPRINT_SCHEME,
            "max_tokens": options.max_tokens,
            "chunks_digest": header["digest"],  # the chunks file this registry describes
            "chunks": build_registry(written, modes),
            "repeated_spans": [{"lines": r.lines, "locations": r.locations} for r in repeats],
        }
    # one unit as far as two files can be: both written in full before either is renamed (a
    # failure while writing changes neither); a pair that still disagrees (killed between
    # the two renames) is refused by every reader through chunks_digest
    with atomic_write(options.out) as handle:
        handle.write(orjson.dumps(header, option=option))
        handle.write(b"".join(lines))
        if registry is not None:
            write_bytes(options.registry, canonical_json(sealed(registry)).encode("utf-8"))
