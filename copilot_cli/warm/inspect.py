"""What a warm plan holds, verified (for `copilot-opt inspect`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from copilot_cli.core.inspection import Expected, Inspection, Problem, checked
from copilot_cli.warm.plan import read_plan


def inspect_plan(
    path: Path, *, verify: bool = True, expected: Expected | None = None
) -> Inspection:
    """A warm plan described (items per tier, budget, predictor, the KV folder it was made
    for); verified: its digest and shape, and with a model the fingerprints it records."""
    expected = expected or Expected()
    problems: list[Problem] = []
    plan = checked(problems, str(path), lambda: read_plan(path)) if verify else read_plan(path)
    if plan is None:
        return Inspection(str(path), "warm-plan", {}, verify, problems)
    tiers = Counter(item.tier for item in plan.items)
    info = {
        "items": len(plan.items),
        **{f"tier {tier}": tiers[tier] for tier in sorted(tiers)},
        "budget": plan.budget,
        "held_bytes": plan.held_bytes,
        "predictor": plan.predictor,
        "model_fingerprint": (plan.kv or {}).get("model_fingerprint"),
        "tokenizer_fingerprint": (plan.kv or {}).get("tokenizer_fingerprint"),
    }
    for key in ("model_fingerprint", "tokenizer_fingerprint"):
        want = getattr(expected, key)
        if verify and want is not None and info[key] not in (None, want):
            what = key.removesuffix("_fingerprint")
            problems.append(Problem(str(path), f"made for another {what}"))
    return Inspection(str(path), "warm-plan", info, verify, problems)
