"""What regress returns: typed per-variant results, the overall verdict, and their JSON form."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from copilot_cli.core.errors import CheckFailed
from copilot_cli.regress.options import Thresholds

if TYPE_CHECKING:
    from copilot_cli.core.metrics import Summary


@dataclass(frozen=True)
class WorstPosition:
    """One of the positions where a variant's distribution moved most."""

    case: str
    position: int
    kl: float
    context: str  # the decoded tokens up to the position
    base_top: str
    variant_top: str


@dataclass(frozen=True)
class GenerationStats:
    """Greedy continuations of the variant vs the base model's."""

    continuations: int
    exact_match: float
    bleu4: float
    levenshtein: float


@dataclass(frozen=True)
class Timing:
    forward_seconds: float
    metric_seconds: float
    metric_share: float


@dataclass(frozen=True)
class Provenance:
    """What the comparison ran on."""

    copilot_opt_version: str
    torch_version: str
    transformers_version: str
    model: str
    model_fingerprint: str
    tokenizer_fingerprint: str
    prompts: str
    prompts_hash: str
    prompt_count: int
    baseline: str | None
    gen_tokens: int
    max_tokens: int
    baseline_check: int | None = None  # cases of a baseline recomputed (0: the check was off)

    @property
    def unchecked_baseline(self) -> bool:
        """A baseline was used without recomputing any of its cases (baseline_check 0)."""
        return self.baseline is not None and self.baseline_check == 0


@dataclass
class VariantResult:
    name: str
    spec: str
    case_set: str
    summary: Summary
    groups: dict[str, Summary]
    prompt_kl: dict[str, float]
    generation: GenerationStats | None
    worst: list[WorstPosition]
    failures: list[str]
    kl_values: list[float] = field(repr=False)
    position_kl: dict[str, list[float]] = field(repr=False)
    case_group: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "spec": self.spec,
            "case_set": self.case_set,
            "passed": self.passed,
            "failures": self.failures,
            "summary": self.summary.to_dict(),
            "groups": {k: v.to_dict() for k, v in sorted(self.groups.items())},
            "prompt_kl": dict(sorted(self.prompt_kl.items())),
            "generation": dataclasses.asdict(self.generation) if self.generation else None,
            "worst_positions": [dataclasses.asdict(w) for w in self.worst],
        }


@dataclass
class RegressResult:
    variants: list[VariantResult]
    thresholds: Thresholds
    provenance: Provenance
    timing: Timing
    baseline_saved: str | None = None
    reports_written: list[str] = field(default_factory=list)
    partial: str | None = None  # what an unfinished run did (a report written as it goes)

    @property
    def passed(self) -> bool:
        return self.partial is None and all(v.passed for v in self.variants)

    @property
    def failures(self) -> list[str]:
        """One line per failing variant (empty: the gate passes)."""
        return [f"{v.name}: {'; '.join(v.failures)}" for v in self.variants if v.failures]

    def raise_for_failures(self) -> None:
        """Raise CheckFailed (exit 1) naming the failing variants, if any."""
        failed = [v.name for v in self.variants if not v.passed]
        if failed:
            raise CheckFailed(f"regression in {', '.join(failed)}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "copilot-opt.regress-report",
            "format_version": 1,
            "passed": self.passed,
            "partial": self.partial,
            "thresholds": self.thresholds.to_dict(),
            "lax_thresholds": self.thresholds.lax(),
            "baseline_checked": not self.provenance.unchecked_baseline,
            "provenance": dataclasses.asdict(self.provenance),
            "timing": dataclasses.asdict(self.timing),
            "baseline_saved": self.baseline_saved,
            "variants": [v.to_dict() for v in self.variants],
        }
