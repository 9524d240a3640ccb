"""What regress collects per variant while cases are scored, and how records become it."""

from __future__ import annotations

from typing import Any

import torch

from copilot_cli.core.metrics import Accumulator, PositionMetrics
from copilot_cli.regress.cases import Case
from copilot_cli.regress.results import WorstPosition
from copilot_cli.regress.units import CaseSet, Record
from copilot_cli.regress.variants import VariantSpec


class Tally:
    """Everything collected for one variant while cases stream by."""

    def __init__(self) -> None:
        self.all = Accumulator()
        self.groups: dict[str, Accumulator] = {}
        self.prompt_kl: dict[str, float] = {}
        self.position_kl: dict[str, list[float]] = {}
        self.worst: list[WorstPosition] = []
        self.case_group: dict[str, str] = {}
        self.gen: list[tuple[bool, float, float]] = []

    def add(
        self,
        case: Case,
        metrics: PositionMetrics,
        base_top: torch.Tensor,
        var_top: torch.Tensor,
        tokenizer: Any,
    ) -> None:
        self.all.add(metrics)
        self.groups.setdefault(case.group, Accumulator()).add(metrics)
        kl = metrics.kl
        self.prompt_kl[case.id] = float(kl.mean()) if kl.numel() else 0.0
        self.case_group[case.id] = case.group
        self.position_kl[case.id] = [round(float(v), 8) for v in kl]
        for index in torch.argsort(kl, descending=True)[:5].tolist():
            t = case.split + index
            self.worst.append(
                WorstPosition(
                    case=case.id,
                    position=t,
                    kl=float(kl[index]),
                    context=tokenizer.decode(list(case.ids[max(0, t - 15) : t + 1])),
                    base_top=tokenizer.decode([int(base_top[index])]),
                    variant_top=tokenizer.decode([int(var_top[index])]),
                )
            )
        self.worst = sorted(self.worst, key=lambda w: -w.kl if w.kl == w.kl else -float("inf"))[:5]


def tallies_of(
    sets: list[CaseSet],
    specs: list[VariantSpec],
    records: dict[tuple[str, int], Record],
    tokenizer: Any,
) -> dict[str, Tally]:
    """The tallies of `records`, added set by set in case order (so every statistic is the
    same however the cases were batched or sharded)."""
    tallies = {spec.name: Tally() for spec in specs}
    for case_set in sets:
        for index, case in enumerate(case_set.cases):
            record = records.get((case_set.name, index))
            if record is None:
                continue
            for spec in case_set.members:
                metrics, base_top, var_top, gen_row = record[spec.name]
                tallies[spec.name].add(case, metrics, base_top, var_top, tokenizer)
                if gen_row is not None:
                    tallies[spec.name].gen.append(gen_row)
    return tallies
