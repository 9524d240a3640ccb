"""--verify: logits of a probe continuation from the loaded cache vs a full recompute."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from copilot_cli.core import lazy
from copilot_cli.core.models import LoadedModel, cache_kwargs
from copilot_cli.core.tokens import continuation_ids
from copilot_cli.kv.loader import KVCacheDir, load_prefix

transformers = lazy.module("transformers")

PROBE_TEXT = "\ndef main(argv):\n    for name in sorted(argv):\n        print(name.upper())\n"
# Max |Δlogit| allowed between cached and recomputed logits. float32 is a fixed bound;
# float16/bfloat16 bounds come from scripts/measure_kv_tolerance.py (shipped model and three
# random-init architectures; worst seen: float32 9.5e-6, float16 0.0156, bfloat16 0.125) with
# ~2x headroom. A real model's logits are larger and its stack deeper (SmolLM2-135M in
# bfloat16: 0.85), so in half precision a prefix past the fixed bound is judged against the
# model's own noise floor instead: the same logits recomputed a second valid way (prefix, then
# probe over a fresh cache), with FLOOR_HEADROOM. A wrong cache is off by whole logits. The
# floor is measured once per run (on the first prefix past the fixed bound) and again only
# for a prefix past it, which is then judged against the larger of the two.
TOLERANCE = {"float32": 1e-4, "float16": 0.03, "bfloat16": 0.25}
FLOOR_HEADROOM = 2.0


@dataclass
class VerifyReport:
    name: str
    prefix_tokens: int
    probe_tokens: int
    max_abs_diff: float
    greedy_agreement: float
    tolerance: float
    noise_floor: float | None = None  # measured only where the fixed bound was passed

    @property
    def passed(self) -> bool:
        return self.max_abs_diff <= self.tolerance

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "passed": self.passed}


@torch.no_grad()
def verify_prefixes(
    loaded: LoadedModel, kv_dir: Path, probe_text: str = PROBE_TEXT, names: list[str] | None = None
) -> list[VerifyReport]:
    """For each stored prefix: max |Δlogit| and greedy agreement over the probe positions,
    the loaded cache against a recompute that computes each distinct token once (prefixes in
    token order share their common start, as the radix tree they were written from)."""
    kv = KVCacheDir(kv_dir)
    model = loaded.model
    device = next(model.parameters()).device
    probe = continuation_ids(loaded.tokenizer, probe_text)
    tolerance = TOLERANCE[kv.index.dtype]
    names = list(names or kv.names())
    reference = _Recompute(model, device)
    reports, measured = {}, None  # the noise floor measured so far (one full recompute)
    for name in sorted(names, key=lambda n: kv.prefix(n).token_ids):
        ids = list(kv.prefix(name).token_ids)
        full = reference.probe(ids, probe)
        cache = load_prefix(kv_dir, model, name, tokenizer=loaded.tokenizer)
        cached = model(torch.tensor([probe], device=device), **cache_kwargs(model, cache)).logits[0]
        diff = (full.float() - cached.float()).abs().max().item()
        agree = (full.argmax(-1) == cached.argmax(-1)).float().mean().item()
        floor = None
        if diff > tolerance and kv.index.dtype != "float32":
            # the floor of this model and dtype, measured once; a prefix past it is judged
            # against its own (so only a prefix that looks wrong pays a second recompute)
            if measured is None or diff > FLOOR_HEADROOM * measured:
                measured = max(measured or 0.0, _noise_floor(model, ids, probe, full))
            floor = measured
        reports[name] = VerifyReport(
            name=name,
            prefix_tokens=len(ids),
            probe_tokens=len(probe),
            max_abs_diff=diff,
            greedy_agreement=agree,
            tolerance=tolerance if floor is None else max(tolerance, FLOOR_HEADROOM * floor),
            noise_floor=floor,
        )
    return [reports[name] for name in names]


class _Recompute:
    """The model's own cache for one prefix at a time, kept between prefixes: the next prefix
    crops it to their common start and computes only what follows."""

    def __init__(self, model: Any, device: Any) -> None:
        self.model, self.device = model, device
        self.cache = transformers.DynamicCache(config=model.config)
        self.ids: list[int] = []
        self.computed = 0  # tokens run through the model for prefixes (each distinct one once)

    def probe(self, ids: list[int], probe: list[int]) -> torch.Tensor:
        common = 0
        for a, b in zip(self.ids, ids, strict=False):
            if a != b:
                break
            common += 1
        self._crop_to(common)
        rest = ids[common:] + probe
        kwargs = cache_kwargs(self.model, self.cache)
        logits = self.model(torch.tensor([rest], device=self.device), **kwargs).logits[0]
        self.computed += len(ids) - common
        self._crop_to(len(ids))
        self.ids = ids
        return logits[len(ids) - common :]

    def _crop_to(self, length: int) -> None:
        extra = self.cache.get_seq_length() - length
        if extra > 0:  # transformers 5: crop(-n) removes the last n tokens
            self.cache.crop(-extra)


def _noise_floor(model: Any, ids: list[int], probe: list[int], reference: torch.Tensor) -> float:
    """max |Δlogit| between two valid ways of computing the probe's logits in this dtype: one
    pass over prefix + probe, and the prefix's cache first, then the probe over it."""
    device = reference.device
    one_pass = model(torch.tensor([ids + probe], device=device)).logits[0, len(ids) :]
    return (one_pass.float() - reference.float()).abs().max().item()
