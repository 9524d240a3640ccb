"""The warm plan: every item a server may need, its tier, bytes and predicted probability.

    L0  always resident: loaded at start (the items at least `l0_probability` likely, up to
        `l0_share` of the budget)
    L1  pre-loaded in the background after start, in priority order
    L2  loaded on first use; a Bloom filter over L2 answers "certainly not stored" first

L0 and L1 together never exceed the budget. Format `copilot-opt.warm-plan` (docs/formats.md),
sealed by a digest; with `--kv` bound to that KV folder's fingerprints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from copilot_cli import __version__, chunking, kv
from copilot_cli.core import progress
from copilot_cli.core.artifacts import (
    FINGERPRINT_SCHEME,
    canonical_json,
    check_header,
    check_sealed,
    is_count,
    read_json_artifact,
    sealed,
    write_bytes,
)
from copilot_cli.core.errors import ArtifactError, InputError
from copilot_cli.core.outputs import claim_file
from copilot_cli.warm.bloom import BloomFilter
from copilot_cli.warm.log import read_log
from copilot_cli.warm.options import WarmPlanOptions
from copilot_cli.warm.predict import PREDICTORS, Evaluation, Item, Sizes, evaluate

FORMAT = "copilot-opt.warm-plan"
FORMAT_VERSION = 1
TIERS = ("L0", "L1", "L2")


@dataclass(frozen=True)
class PlanItem:
    id: str
    kind: str  # "prefix" | "chunk"
    tier: str
    bytes: int
    probability: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Plan:
    items: list[PlanItem]
    budget: int
    window: float
    predictor: str
    evaluation: dict[str, dict[str, Any]] = field(default_factory=dict)
    bloom: BloomFilter | None = None
    fp_rate: float = 0.01
    kv: dict[str, str] | None = None
    unknown_items: int = 0
    held_bytes: int | None = None  # L0 + L1 as a store holds them (shared segments once)
    tier_bytes: dict[str, int] | None = None  # per tier, a segment its items share once

    def check_fits(self, index: Any, where: str) -> None:
        """Refuse (ArtifactError) a plan made for another KV folder's model or tokenizer
        (`index`: the folder's KVIndex); the one check every consumer of a plan makes
        (PrefixStore, the vLLM connector)."""
        if not self.kv:
            return
        for key in ("model_fingerprint", "tokenizer_fingerprint"):
            if self.kv.get(key) != getattr(index, key):
                what = key.removesuffix("_fingerprint")
                raise ArtifactError(
                    f"the warm plan was made for another KV folder's {what}", where=where
                )

    def tier(self, kind: str, name: str) -> str | None:
        for item in self.items:
            if item.kind == kind and item.id == name:
                return item.tier
        return None

    def in_tier(self, tier: str, kind: str = "prefix") -> list[PlanItem]:
        """Items of a tier, highest probability first (the plan's order)."""
        return [i for i in self.items if i.tier == tier and i.kind == kind]

    def may_be_stored(self, kind: str, name: str) -> bool:
        """False only when `name` is certainly not an L2 item (no disk read needed)."""
        return self.bloom is None or f"{kind}:{name}" in self.bloom

    @property
    def resident_bytes(self) -> int:
        if self.held_bytes is not None:
            return self.held_bytes
        return sum(i.bytes for i in self.items if i.tier in ("L0", "L1"))

    def bytes_of_tiers(self) -> dict[str, int]:
        """Bytes each tier holds, a segment shared by its items counted once (a plan without
        the record: the items' own sizes summed)."""
        if self.tier_bytes is not None:
            return dict(self.tier_bytes)
        return {t: sum(i.bytes for i in self.items if i.tier == t) for t in TIERS}

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "copilot_opt_version": __version__,
            "fingerprint_scheme": FINGERPRINT_SCHEME,
            "budget": self.budget,
            "window": self.window,
            "predictor": self.predictor,
            "evaluation": self.evaluation,
            "kv": self.kv,
            "fp_rate": self.fp_rate,
            "resident_bytes": self.resident_bytes,
            "unknown_items": self.unknown_items,
            "tiers": {t: sum(1 for i in self.items if i.tier == t) for t in TIERS},
            "tier_bytes": self.bytes_of_tiers(),
            "items": [i.to_dict() for i in self.items],
            "l2_bloom": self.bloom.to_dict() if self.bloom else None,
        }


def _sizes(options: WarmPlanOptions) -> tuple[Sizes, dict[str, str] | None]:
    sizes = Sizes()
    bound = None
    if options.kv is not None:
        folder = kv.KVCacheDir(options.kv)
        for name in folder.index.prefixes:
            parts = [(f"segment:{s.hash}", s.bytes) for s in folder.index.chain(name)]
            sizes.add(("prefix", name), parts)
        keys = ("model_fingerprint", "tokenizer_fingerprint")
        bound = {k: getattr(folder.index, k) for k in keys}
    if options.chunks is not None:
        for chunk in chunking.read_chunks(options.chunks).chunks:
            item = ("chunk", chunk.id)
            sizes.add(item, [(f"chunk:{chunk.id}", len(chunk.text.encode("utf-8")))])
    return sizes, bound


def make_plan(options: WarmPlanOptions) -> Plan:
    """Measure the predictors on held-out time (or the one asked for), plan with the best.

    Raises:
        InputError: a malformed log line (naming file:line), a log naming nothing the KV
            folder or chunks file holds.
    """
    claim_file(options.out, "out", fmt=FORMAT, label="warm plan", inputs=options.logs)
    requests = read_log(options.logs)
    sizes, kv = _sizes(options)
    used = {item for r in requests for item in r.items()}
    if not used & sizes.keys():
        raise InputError(
            "the log uses no prefix or chunk that --kv / --chunks hold", where=str(options.logs[0])
        )
    names = list(PREDICTORS) if options.predictor == "auto" else [options.predictor]
    evaluations: dict[str, Evaluation] = {}
    with progress.progress(f"measuring {len(names)} predictors", total=len(names)) as bar:
        for name in names:
            evaluations[name] = evaluate(
                PREDICTORS[name](options.window), requests, sizes, options.budget, options.window
            )
            bar.advance()
    best = max(names, key=lambda n: (round(evaluations[n].hit_rate, 3), -names.index(n)))
    predictor = PREDICTORS[best](options.window)
    predictor.fit(requests)
    scores = predictor.scores(requests, requests[-1].t)
    items, held, tier_bytes = _tiers(scores, sizes, options)
    l2 = [f"{i.kind}:{i.id}" for i in items if i.tier == "L2"]
    return Plan(
        items=items,
        budget=options.budget,
        window=options.window,
        predictor=best,
        evaluation={n: e.to_dict() for n, e in evaluations.items()},
        bloom=BloomFilter.for_items(l2, options.fp_rate) if l2 else None,
        fp_rate=options.fp_rate,
        kv=kv,
        unknown_items=len(used - sizes.keys()),
        held_bytes=held,
        tier_bytes=tier_bytes,
    )


def _tiers(
    scores: dict[Item, float], sizes: Sizes, options: WarmPlanOptions
) -> tuple[list[PlanItem], int, dict[str, int]]:
    """Items in tiers (L0/L1 while the budget holds, a segment shared with an item already
    in counting nothing again), and the bytes L0 + L1 hold together. L0 pins at most
    `l0_share` of the budget: pinning all of it leaves a store no room to follow the requests
    (on bench_warm's replay, pinning the whole budget hit 0.65 of requests, half of it 0.89)."""
    ordered = sorted(sizes, key=lambda i: (-scores.get(i, 0.0), i))
    items, used, pinned, held, held_l0 = [], 0, 0, set(), set()
    for item in ordered:
        p = round(scores.get(item, 0.0), 6)
        new = sizes.new_parts(item, held) if isinstance(sizes, Sizes) else [("", sizes[item])]
        cost = sum(size for _, size in new)
        fits = p > 0 and used + cost <= options.budget  # shared segments count once
        new_l0 = sizes.new_parts(item, held_l0) if isinstance(sizes, Sizes) else new
        pin_cost = sum(size for _, size in new_l0)  # what pinning it pins (shared with L1 too)
        pin = p >= options.l0_probability and pinned + pin_cost <= options.l0_share * options.budget
        tier = ("L0" if pin else "L1") if fits else "L2"
        if fits:
            used += cost
            held.update(name for name, _ in new)
        if fits and pin:
            pinned += pin_cost
            held_l0.update(name for name, _ in new_l0)
        items.append(PlanItem(item[1], item[0], tier, sizes[item], p))
    rank = {"L0": 0, "L1": 1, "L2": 2}
    ordered_items = sorted(items, key=lambda i: (rank[i.tier], -i.probability, i.kind, i.id))
    return ordered_items, used, _tier_bytes(ordered_items, sizes)


def _tier_bytes(items: list[PlanItem], sizes: Sizes) -> dict[str, int]:
    """Distinct bytes per tier: a segment two items of a tier share is counted once."""
    out = {}
    for tier in TIERS:
        seen: set[str] = set()
        total = 0
        for i in (i for i in items if i.tier == tier):
            item = (i.kind, i.id)
            parts = sizes.new_parts(item, seen) if isinstance(sizes, Sizes) else [("", i.bytes)]
            total += sum(size for _, size in parts)
            seen.update(name for name, _ in parts)
        out[tier] = total
    return out


def write_plan(plan: Plan, path: Path) -> None:
    write_bytes(path, canonical_json(sealed(plan.to_dict())).encode("utf-8"))


def read_plan(path: Path | str) -> Plan:
    """A plan file, its digest and shape checked."""
    path = Path(path)
    data = read_json_artifact(path, fmt=FORMAT, version=FORMAT_VERSION, what="warm plan")
    check_sealed(data, where=str(path))
    check_header(data, where=str(path), fmt=FORMAT, version=FORMAT_VERSION)
    try:
        items = [PlanItem(**entry) for entry in data["items"]]
        bloom = BloomFilter.from_dict(data["l2_bloom"]) if data["l2_bloom"] else None
        if any(i.tier not in TIERS for i in items):
            raise ValueError("an item has an unknown tier")
        _check_shape(data, items)
        return Plan(
            items=items,
            budget=int(data["budget"]),
            window=float(data["window"]),
            predictor=str(data["predictor"]),
            evaluation=data["evaluation"],
            bloom=bloom,
            fp_rate=float(data["fp_rate"]),
            kv=data["kv"],
            unknown_items=int(data["unknown_items"]),
            held_bytes=int(data["resident_bytes"]),
            tier_bytes=_read_tier_bytes(data.get("tier_bytes")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ArtifactError(f"malformed plan ({exc})", where=str(path)) from None


def _read_tier_bytes(value: Any) -> dict[str, int] | None:
    if value is None:  # a plan written before the record
        return None
    if not (isinstance(value, dict) and set(value) == set(TIERS)) or not all(
        is_count(v) for v in value.values()
    ):
        raise ValueError("'tier_bytes' must give a count for each of L0, L1, L2")
    return {t: int(value[t]) for t in TIERS}


def _check_shape(data: dict[str, Any], items: list[PlanItem]) -> None:
    """Types every consumer relies on (a resealed plan can hold anything)."""
    for item in items:
        if not (
            isinstance(item.id, str)
            and item.kind in ("prefix", "chunk")
            and is_count(item.bytes)
            and isinstance(item.probability, (int, float))
            and 0 <= item.probability <= 1
        ):
            raise ValueError(f"item {str(item.id)[:40]!r} is malformed")
    kv = data["kv"]
    if kv is not None and not (
        isinstance(kv, dict) and all(isinstance(v, str) for v in kv.values())
    ):
        raise ValueError("'kv' must be an object of strings")
    if not isinstance(data["evaluation"], dict) or not is_count(data["budget"]):
        raise ValueError("'evaluation' must be an object and 'budget' a count")
    held = data["resident_bytes"]
    if not is_count(data["unknown_items"]) or (held is not None and not is_count(held)):
        raise ValueError("'unknown_items' and 'resident_bytes' must be counts")
    if not isinstance(data["window"], (int, float)) or not isinstance(
        data["fp_rate"], (int, float)
    ):
        raise ValueError("'window' and 'fp_rate' must be numbers")
