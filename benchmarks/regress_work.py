"""The minimum model work a regress run needs, timed directly (bench_regress, bench_scale).

For the cases regress scores (the same case sets, the same batches): one batched forward of
the original model per distinct sequence, one forward per variant over its cases (a kv
variant: its stored prefix loaded, the rest computed; kv-dtype: the first half's cache
computed and degraded, then the rest), and the greedy tokens each continuation scores, as
single-token steps. Nothing else: no metric, no report, no baseline, no case building.
Timed with the same thread count as the run it is compared with, side by side.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from copilot_cli.core.models import cache_kwargs, context_length
from copilot_cli.core.prompt_sets import load_prompts
from copilot_cli.regress.cases import build_cases
from copilot_cli.regress.decode import eos_ids, greedy
from copilot_cli.regress.forward import forward_rows, plan_batches, row_cache
from copilot_cli.regress.variants import applied, degrade_cache, parse_variant


@torch.no_grad()
def minimum_work_seconds(loaded: Any, options: Any) -> float:
    """Seconds of the model work `options` (RegressOptions) asks for, and nothing more."""
    model, tokenizer = loaded.model, loaded.tokenizer
    prompts = load_prompts(options.prompts)
    specs = [parse_variant(v) for v in options.variants]
    vocab = model.get_output_embeddings().weight.shape[0]
    n, eos = options.gen_tokens, eos_ids(model, tokenizer)
    loaded_quant: dict[str, Any] = {}  # each quant artifact read once, as regress does
    started = time.perf_counter()
    families: dict[str, list[Any]] = {}
    for spec in specs:
        key = spec.case_set if spec.case_set.startswith("kv:") else "ids"
        families.setdefault(key, []).append(spec)
    for key, members in families.items():
        name = key if key != "ids" else "prompts"
        cases = build_cases(
            name, prompts, tokenizer, options.max_tokens, context_length(model.config)
        )
        lengths = {i: len(c.ids) for i, c in enumerate(cases) if c.scored > 0}
        own = {  # each variant's cases, built once (split: the same ids, split at half)
            spec.name: build_cases("split", prompts, tokenizer, options.max_tokens)
            if spec.case_set == "split"
            else cases
            for spec in members
        }
        for batch in plan_batches(lengths, options.batch_size, vocab):
            seqs = [cases[i].ids for i in batch]
            starts = [0 if key == "ids" else cases[i].split for i in batch]
            _forward(model, seqs, starts, n, eos)  # the original
            for spec in members:
                with applied(spec, model, tokenizer, loaded_quant):
                    _variant(model, spec, [own[spec.name][i] for i in batch], n, eos)
    return time.perf_counter() - started


def _forward(model: Any, seqs: list[Any], starts: list[int], n: int, eos: list[int]) -> None:
    rows = forward_rows(model, seqs, starts, keep_cache=n > 0)
    for row, ids in enumerate(seqs):
        if n:
            greedy(model, torch.tensor([ids]), n, eos, row_cache(model, rows, row))


def _variant(model: Any, spec: Any, cases: list[Any], n: int, eos: list[int]) -> None:
    if spec.case_set == "prompts":
        _forward(model, [c.ids for c in cases], [0] * len(cases), n, eos)
        return
    from copilot_cli.kv import load_prefix

    for case in cases:
        kv = spec.kind("kv")
        if kv is not None:
            cache = load_prefix(kv.arg, model, case.prefix)
        else:
            from transformers import DynamicCache

            cache = DynamicCache()
            model(torch.tensor([case.ids[: case.split]]), **cache_kwargs(model, cache))
            degrade_cache(cache, spec.kind("kv-dtype").arg)
        model(torch.tensor([case.ids[case.split :]]), **cache_kwargs(model, cache))
        if n:
            cache.crop(-1)
            greedy(model, torch.tensor([case.ids]), n, eos, cache)
