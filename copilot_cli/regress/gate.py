"""Thresholds and verdicts: gate on confidence bounds, not point estimates."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from copilot_cli.core.metrics import Summary
from copilot_cli.regress.options import Thresholds

__all__ = ["Thresholds", "verdict"]


def verdict(
    summary: Summary,
    prompt_kl: dict[str, float],
    generation: Mapping[str, float] | Any | None,
    thresholds: Thresholds,
) -> list[str]:
    """Reasons a variant fails (empty list: it passes). Every comparison is written so that a
    NaN measurement fails."""
    if generation is not None and not isinstance(generation, Mapping):
        generation = dataclasses.asdict(generation)
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
