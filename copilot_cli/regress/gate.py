"""Thresholds and verdicts: gate on confidence bounds, not point estimates."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from copilot_cli.core.errors import InputError
from copilot_cli.core.metrics import Summary

# (lowest, highest, lowest allowed itself) of each threshold: KL bounds must be above 0, shares
# in [0, 1]; every value finite. NaN compares false with everything, so an unchecked NaN
# threshold would pass any variant.
RANGES: dict[str, tuple[float, float, bool]] = {
    "max_mean_kl": (0.0, math.inf, False),
    "min_same_top1": (0.0, 1.0, True),
    "max_prompt_kl": (0.0, math.inf, False),
    "min_exact_match": (0.0, 1.0, True),
    "min_bleu": (0.0, 1.0, True),
}


@dataclass(frozen=True)
class Thresholds:
    """Pass conditions of a variant.

    Attributes:
        max_mean_kl: the one-sided 95% upper bound of the mean KL must not exceed this.
        min_same_top1: the one-sided 95% lower bound of the same-top-1 share must reach this.
        max_prompt_kl: no single prompt's mean KL may exceed this.
        min_exact_match: share of greedy continuations equal to the base's (None: report only).
        min_bleu: mean BLEU-4 of greedy continuations (None: report only).
    """

    max_mean_kl: float = 1e-3
    min_same_top1: float = 0.99
    max_prompt_kl: float = 1e-2
    min_exact_match: float | None = None
    min_bleu: float | None = None

    def __post_init__(self) -> None:
        for name, (low, high, low_ok) in RANGES.items():
            value = getattr(self, name)
            if value is None and name in ("min_exact_match", "min_bleu"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(f"must be a number, got {value!r}", where=name)
            if not math.isfinite(value):
                raise InputError(f"must be a finite number, got {value}", where=name)
            if value < low or (value == low and not low_ok) or value > high:
                bound = f"[{low:g}, {high:g}]" if low_ok else f"({low:g}, {high:g}]"
                raise InputError(
                    f"{value:g} is outside {bound}".replace(", inf]", ", inf)"), where=name
                )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def verdict(
    summary: Summary,
    prompt_kl: dict[str, float],
    generation: dict[str, float] | None,
    thresholds: Thresholds,
) -> list[str]:
    """Reasons a variant fails (empty list: it passes)."""
    reasons = []
    if summary.non_finite:
        return [f"NaN or Inf in the variant's logits at {summary.non_finite} positions"]
    if not math.isfinite(summary.kl_upper) or summary.kl_upper > thresholds.max_mean_kl:
        reasons.append(
            f"mean KL {summary.kl_mean:.3g} (95% upper bound {summary.kl_upper:.3g}) "
            f"> {thresholds.max_mean_kl:g}"
        )
    if not summary.same_top1_lower >= thresholds.min_same_top1:  # NaN fails
        reasons.append(
            f"same top-1 {summary.same_top1:.2%} (95% lower bound "
            f"{summary.same_top1_lower:.2%}) < {thresholds.min_same_top1:.2%}"
        )
    worst = max(
        prompt_kl.items(),
        key=lambda kv: math.inf if math.isnan(kv[1]) else kv[1],
        default=None,
    )
    if worst is not None and not worst[1] <= thresholds.max_prompt_kl:  # NaN fails
        reasons.append(
            f"prompt {worst[0]} has mean KL {worst[1]:.3g} > {thresholds.max_prompt_kl:g}"
        )
    if generation:
        if (
            thresholds.min_exact_match is not None
            and not generation["exact_match"] >= thresholds.min_exact_match
        ):
            reasons.append(
                f"exact match {generation['exact_match']:.2%} < {thresholds.min_exact_match:.2%}"
            )
        if thresholds.min_bleu is not None and not generation["bleu4"] >= thresholds.min_bleu:
            reasons.append(f"BLEU-4 {generation['bleu4']:.3f} < {thresholds.min_bleu:.3f}")
    return reasons
