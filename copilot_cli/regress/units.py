"""Units of regress work: one batch of cases, scored for every case set on the same ids.

The case sets `prompts` and `split` hold the same token ids per prompt (they differ only in
which positions are scored), so one forward of the original model serves both: a unit holds
both sets' share of a batch and computes the original once, from the earliest scored
position. A kv set (the stored prefix + the prompt) is its own unit family.

`plan_units` cuts the work into units (the batches of `forward.plan_batches`); `score_unit`
scores one. A unit is a pure function of its inputs: this process and a Ray actor given the
same unit compute the same records (core/executor.py runs them; `score_worker` builds a worker
elsewhere, `score` runs a unit on one). What comes back is per position, not averaged: the
caller adds the records to its tallies in case order, so every statistic is computed over the
same values in the same order wherever units ran. A baseline being saved is written per unit
(the same tensors, keyed by case) and merged by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from copilot_cli.core.metrics import PositionMetrics
from copilot_cli.core.models import load_model
from copilot_cli.regress.baseline import BaselineWriter
from copilot_cli.regress.cases import Case
from copilot_cli.regress.engine import Runner
from copilot_cli.regress.forward import plan_batches
from copilot_cli.regress.textmetrics import bleu4, levenshtein
from copilot_cli.regress.variants import VariantSpec

# per variant: position metrics, base and variant top-1 ids, generation row (or None)
Record = dict[str, tuple[PositionMetrics, torch.Tensor, torch.Tensor, Any]]
Job = tuple["Unit", "int | None"]  # a unit, and the top-k of the baseline being saved (or None)


@dataclass(frozen=True)
class CaseSet:
    """A case set as built: its cases, their hash, the variants scored on it and the stored
    baseline's cases (empty: the original is computed)."""

    name: str
    cases: list[Case]
    set_hash: str
    members: tuple[VariantSpec, ...]
    bases: dict[int, Any]


@dataclass(frozen=True)
class Part:
    """One case set's share of a unit: (index, case) pairs with something to score."""

    case_set: str
    set_hash: str
    members: tuple[VariantSpec, ...]
    cases: tuple[tuple[int, Case], ...]
    bases: dict[int, Any]


@dataclass(frozen=True)
class Unit:
    parts: tuple[Part, ...]

    @property
    def size(self) -> int:
        return sum(len(part.cases) for part in self.parts)


def plan_units(sets: list[CaseSet], batch_size: int, vocab: int) -> list[Unit]:
    """Every scored case of `sets` in units; sets whose cases hold the same ids share units."""
    units: list[Unit] = []
    for family in _families(sets):
        lengths: dict[int, int] = {}
        for case_set in family:
            for index, case in enumerate(case_set.cases):
                if case.scored > 0:
                    lengths[index] = len(case.ids)
        for batch in plan_batches(lengths, batch_size, vocab):
            parts = tuple(
                Part(
                    s.name,
                    s.set_hash,
                    s.members,
                    tuple((i, s.cases[i]) for i in batch if s.cases[i].scored > 0),
                    {i: s.bases[i] for i in batch if i in s.bases},
                )
                for s in family
            )
            units.append(Unit(tuple(p for p in parts if p.cases)))
    return units


def _families(sets: list[CaseSet]) -> list[list[CaseSet]]:
    """Sets grouped by identical token ids (in set order)."""
    families: list[list[CaseSet]] = []
    for case_set in sets:
        ids = [case.ids for case in case_set.cases]
        home = next(
            (f for f in families if [case.ids for case in f[0].cases] == ids),
            None,
        )
        if home is None:
            families.append([case_set])
        else:
            home.append(case_set)
    return families


def score_unit(
    runner: Any, unit: Unit, writer: BaselineWriter | None
) -> list[tuple[str, int, Record]]:
    """(case set, case index, record) for every case of `unit`."""
    bases = _bases(runner, unit, writer)
    out = []
    for part in unit.parts:
        records: dict[int, Record] = {index: {} for index, _ in part.cases}
        cases = [case for _, case in part.cases]
        for spec in part.members:
            rows = runner.variant_rows(spec, cases)
            for (index, case), (logits, gen) in zip(part.cases, rows, strict=True):
                base, base_gen = bases[part.case_set, index]
                targets = torch.tensor(case.ids[case.split + 1 :])
                metrics, base_top = runner.compare(base, logits, targets)
                gen_row = None
                if gen is not None and runner.options.gen_tokens:
                    gen_row = (gen == base_gen, bleu4(base_gen, gen), levenshtein(base_gen, gen))
                records[index][spec.name] = (metrics, base_top, logits.argmax(-1), gen_row)
        out.extend((part.case_set, index, record) for index, record in records.items())
    return out


def _bases(
    runner: Any, unit: Unit, writer: BaselineWriter | None
) -> dict[tuple[str, int], tuple[Any, list[int]]]:
    """The original model per (case set, index): stored, or one batched forward for the
    unit's distinct indices, each from the earliest position any of its sets scores."""
    found: dict[tuple[str, int], tuple[Any, list[int]]] = {}
    starts: dict[int, int] = {}
    seqs: dict[int, tuple[int, ...]] = {}
    for part in unit.parts:
        for index, case in part.cases:
            if index in part.bases:
                found[part.case_set, index] = (part.bases[index], part.bases[index].generated)
            else:
                starts[index] = min(starts.get(index, case.split), case.split)
                seqs[index] = case.ids
    if not seqs:
        return found
    order = list(seqs)  # the batch's order: the same rows as its variants' forwards
    logits, gens = runner.base_rows([seqs[i] for i in order], [starts[i] for i in order])
    computed = {i: (logits[row], gens[row]) for row, i in enumerate(order)}
    for part in unit.parts:
        for index, case in part.cases:
            if index in part.bases:
                continue
            rows, gen = computed[index]
            base = rows[case.split - starts[index] :]
            found[part.case_set, index] = (base, gen)
            if writer is not None:
                targets = torch.tensor(case.ids[case.split + 1 :])
                writer.add(part.set_hash, index, base, targets, gen)
    return found


@dataclass(frozen=True)
class Scored:
    """A unit's records, the baseline tensors it wrote (when saving one), its model time."""

    records: list[tuple[str, int, Record]]
    tensors: dict[str, torch.Tensor]
    sets: dict[str, int]
    forward_seconds: float
    metric_seconds: float


def score_worker(options: Any, threads: int) -> Any:
    """A worker elsewhere: the model loaded there, with the caller's thread count (the same
    kernels, the same sums)."""

    torch.set_num_threads(threads)
    return Runner(load_model(options.model), options)


def score(runner: Any, job: Job) -> Scored:
    """One unit on `runner` (this process's, or a worker's)."""
    unit, topk = job
    forward, metric = runner.forward_seconds, runner.metric_seconds
    writer = BaselineWriter(topk) if topk is not None else None
    records = score_unit(runner, unit, writer)
    return Scored(
        records,
        writer.tensors if writer else {},
        writer.sets if writer else {},
        runner.forward_seconds - forward,
        runner.metric_seconds - metric,
    )
