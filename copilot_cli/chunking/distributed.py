"""chunk on a Ray cluster: files fan out as tasks; the merge stays with the caller.

Why tasks, not Ray Data: the unit of work is a file whose result must come back whole and in a
known order for a merge that is byte-identical to a local run (dedup across files and
repositories, registry ranking). Tasks over batches of files give that with the least
machinery: a batch is a pure function of (tokenizer, files' bytes, budget), so a task retried
after a worker dies returns the same result. The bytes are shipped with the task (workers need
no view of the caller's disk); at most a few batches per worker are in flight, so the object
store holds a bounded window, not the whole input. Each worker also keeps the per-file cache
of its own machine: a file it chunked before is served from there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from copilot_cli.chunking.options import ChunkOptions
from copilot_cli.core import cluster, progress

BATCH_BYTES = 1 << 20  # at most about one second of chunking per task on one core
MIN_BATCH_BYTES = 16 << 10  # below this, scheduling costs more than the work
BATCH_FILES = 256
BATCHES_PER_WORKER = 4  # small inputs still spread over every worker
IN_FLIGHT_PER_WORKER = 3


def _batches(
    pending: list[tuple[str, str, int]], sizes: dict[str, int], workers: int
) -> Iterator[list[tuple[str, str, int]]]:
    total = sum(sizes.get(job[1], 0) for job in pending)
    target = max(MIN_BATCH_BYTES, min(BATCH_BYTES, total // (workers * BATCHES_PER_WORKER)))
    batch: list[tuple[str, str, int]] = []
    size = 0
    for job in pending:
        batch.append(job)
        size += sizes.get(job[1], 0)
        if size >= target or len(batch) >= BATCH_FILES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _chunk_batch(tokenizer: Any, files: list[tuple[str, bytes, int, str]]) -> list[dict[str, Any]]:
    """On a worker: chunk each (path, bytes, budget, cache key); its machine's cache first."""
    from copilot_cli.chunking.work import (
        WORKER,
        cache_bytes,
        cache_entry,
        chunk_bytes,
        init_worker,
    )
    from copilot_cli.core.artifacts import write_bytes
    from copilot_cli.core.fingerprints import cache_dir

    cluster.maybe_die_once()
    if WORKER.get("tokenizer") is not tokenizer:
        init_worker(tokenizer)
        WORKER["tokenizer"] = tokenizer
    cache = cache_dir() / "chunks"
    out = []
    for rel, data, budget, key in files:
        entry = cache / f"{key}.json" if key else None
        result = cache_entry(entry) if entry is not None and entry.is_file() else None
        if result is None:
            result = chunk_bytes(data, rel, budget)
            if entry is not None:
                with contextlib.suppress(OSError):
                    write_bytes(entry, cache_bytes(result))
        out.append({"path": rel, "result": result})
    return out


def chunk_on_ray(
    pending: list[tuple[str, str, int]],
    keys: dict[str, str],
    sizes: dict[str, int],
    tokenizer: Any,
    options: ChunkOptions,
) -> list[dict[str, Any]]:
    """The outcomes of `pending` (real path, relative path, budget), in its order."""
    from copilot_cli.chunking.walk import read_regular

    assert options.ray is not None
    with cluster.session(options.ray) as ray:
        task = cluster.remote(ray, _chunk_batch, num_cpus=1)
        tokenizer_ref = ray.put(tokenizer)
        window = IN_FLIGHT_PER_WORKER * cluster.workers(ray)
        batches = list(_batches(pending, sizes, cluster.workers(ray)))
        results: list[Any] = [None] * len(batches)
        in_flight: dict[Any, int] = {}
        unreadable: list[dict[str, Any]] = []
        total = sum(sizes.get(job[1], 0) for job in pending)
        with progress.progress(f"chunking {len(pending)} files on Ray", total=total) as bar:
            for index, batch in enumerate(batches):
                files = []
                for real, rel, budget in batch:
                    try:
                        data = read_regular(real)
                    except OSError as exc:
                        unreadable.append({"path": rel, "error": exc.strerror or str(exc)})
                        continue
                    files.append((rel, data, budget, keys[rel] if options.use_cache else ""))
                in_flight[task.remote(tokenizer_ref, files)] = index
                while len(in_flight) >= window:
                    _collect(ray, in_flight, results, batches, sizes, bar)
            while in_flight:
                _collect(ray, in_flight, results, batches, sizes, bar)
    return [outcome for batch in results for outcome in batch] + unreadable


def _collect(
    ray: Any,
    in_flight: dict[Any, int],
    results: list[Any],
    batches: list[list[tuple[str, str, int]]],
    sizes: dict[str, int],
    bar: Any,
) -> None:
    done, _ = ray.wait(list(in_flight), num_returns=1)
    for ref in done:
        index = in_flight.pop(ref)
        results[index] = ray.get(ref)
        bar.advance(sum(sizes.get(job[1], 0) for job in batches[index]))
