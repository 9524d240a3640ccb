"""prefill-kv as units of work: subtrees of the radix tree, run here or by Ray actors
(core/executor.py).

The tree is cut at the shallowest depth that gives every worker a subtree (a unit); with one
worker the units are the trees of the roots. Segments above the cut (the trunk: the shared role
and rules, usually) are needed by every unit below them. Two ways to give a unit its parent
chain's cache:

- ship: this process computes the trunk once and sends each unit the keys/values of its
  chain (bytes moved: the trunk's KV, once per unit);
- recompute: each unit recomputes its chain itself (no trunk step, the trunk's compute
  repeated once per unit).

benchmarks/bench_ray.py measures both; `ship` is the default (TRUNK). Either way a segment is
computed from exactly the cache a local run would hold (the same numbers), its keys and values
come back here, and this process writes every file: byte-identical wherever it ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from copilot_cli.core.executor import Work, open_executor
from copilot_cli.core.models import LoadedModel, load_model
from copilot_cli.kv.options import PrefillOptions
from copilot_cli.kv.prefill import WorkItem, compute_segments

TRUNK = "ship"
Computed = tuple[int, list[torch.Tensor], list[torch.Tensor]]


Unit = tuple[list[WorkItem], Any, int]  # items, the cache they start from, chunk size


class Prefiller:
    """A worker's model; `detach` copies results out of the cache (they travel elsewhere)."""

    def __init__(self, loaded: LoadedModel, detach: bool) -> None:
        self.loaded = loaded
        self.detach = detach

    def fingerprint(self) -> str:
        return self.loaded.model_fingerprint


def prefill_worker(options: PrefillOptions, threads: int) -> Prefiller:
    """A worker elsewhere: the model loaded there, as many threads as the caller's (kernels
    split their sums the same way)."""

    torch.set_num_threads(threads)
    return Prefiller(load_model(options.model_spec()), detach=True)


def compute_unit(worker: Prefiller, unit: Unit) -> Iterator[Computed]:
    items, initial, chunk_size = unit
    for key, keys, values in compute_segments(worker.loaded.model, items, chunk_size, initial):
        if worker.detach:  # not the cache's storage
            keys, values = [k.clone() for k in keys], [v.clone() for v in values]
        yield key, keys, values


def plan(parents: list[int], workers: int) -> tuple[list[int], list[list[int]]]:
    """(trunk, units) over item positions in depth-first order: each unit a whole subtree (a
    contiguous run of positions), the trunk every segment above the cut that has children."""
    depth: list[int] = []
    has_children = [False] * len(parents)
    for parent in parents:
        depth.append(0 if parent < 0 else depth[parent] + 1)
        if parent >= 0:
            has_children[parent] = True
    deepest = max(depth, default=0)
    cut = 0
    for cut in range(deepest + 1):
        roots = [k for k, d in enumerate(depth) if d == cut or (d < cut and not has_children[k])]
        if len(roots) >= workers:
            break
    trunk = [k for k, d in enumerate(depth) if d < cut and has_children[k]]
    units = []
    for root in roots:
        end = root + 1
        while end < len(depth) and depth[end] > depth[root]:
            end += 1
        units.append(list(range(root, end)))
    return trunk, sorted(units)


def _chain(key: int, parents: list[int]) -> list[int]:
    chain = []
    while parents[key] >= 0:
        key = parents[key]
        chain.append(key)
    return chain[::-1]


def compute(
    loaded: LoadedModel, items: list[WorkItem], parents: list[int], options: PrefillOptions
) -> Iterator[Computed]:
    """(key, keys, values) of every item not known: the trunk here, the units where the
    executor runs them (here, streamed, or on Ray actors)."""
    threads = torch.get_num_threads()
    gpus = str(options.model.device).startswith("cuda")
    with open_executor(options.ray) as executor:
        trunk, units = plan(parents, executor.workers(threads, gpus))
        known = {k: items[k].known for k in trunk if items[k].known is not None}
        if trunk and TRUNK == "ship":
            trunk_items = [items[k] for k in trunk]
            for key, keys, values in compute_segments(
                loaded.model, trunk_items, options.chunk_size
            ):
                known[key] = (keys, values)
                yield key, keys, values
        # a unit runs when something in it (or, recomputing, in its chain) is not on disk
        scope = (lambda u: u) if TRUNK == "ship" else (lambda u: u + _chain(u[0], parents))
        units = [u for u in units if any(items[k].known is None for k in scope(u))]
        unclaimed = set(trunk)  # recompute: a trunk segment is emitted by the first unit below
        calls = (
            (*_unit_call(unit, items, parents, known, unclaimed), options.chunk_size)
            for unit in units
        )
        work = Work(
            f"prefilling {len(units)} subtrees",
            calls,
            prefill_worker,
            compute_unit,
            (options, threads),
            here=Prefiller(loaded, detach=False),
            fingerprint=loaded.model_fingerprint,
            weight=lambda call: float(sum(len(item.token_ids) for item in call[0])),
            total=float(sum(len(items[k].token_ids) for unit in units for k in unit)),
            threads=threads,
            gpus=gpus,
            max_workers=len(units),
        )
        for computed in executor.map(work):
            yield from computed


def _unit_call(
    unit: list[int],
    items: list[WorkItem],
    parents: list[int],
    known: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]],
    unclaimed: set[int],
) -> tuple[list[WorkItem], Any]:
    """The items an actor runs for `unit` and the cache it starts from."""
    chain = _chain(unit[0], parents)
    if TRUNK == "ship":
        parts = [known[k] for k in chain]
        if not parts:
            return [items[k] for k in unit], None
        layers = len(parts[0][0])
        initial = (
            [torch.cat([p[0][i] for p in parts], dim=1) for i in range(layers)],
            [torch.cat([p[1][i] for p in parts], dim=1) for i in range(layers)],
        )
        return [items[k] for k in unit], initial
    chain_items = []
    for k in chain:
        item = items[k]
        chain_items.append(
            WorkItem(item.key, item.start, item.token_ids, item.known, emit=k in unclaimed)
        )
        unclaimed.discard(k)
    return chain_items + [items[k] for k in unit], None
