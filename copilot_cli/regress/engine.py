"""The model side of regress: the original and each variant on batches of cases (logits at
the scored positions, greedy continuations), timed. Used by this process and by each Ray
actor alike."""

from __future__ import annotations

import time
from typing import Any

import torch

from copilot_cli.core import lazy
from copilot_cli.core.metrics import PositionMetrics, compare_logits, compare_topk
from copilot_cli.core.models import LoadedModel, cache_kwargs
from copilot_cli.core.tokens import prompt_ids
from copilot_cli.kv import load_prefix
from copilot_cli.prune import prune_text
from copilot_cli.regress.cases import Case
from copilot_cli.regress.decode import eos_ids, greedy, plain_greedy
from copilot_cli.regress.forward import forward_rows, row_cache
from copilot_cli.regress.options import RegressOptions
from copilot_cli.regress.variants import VariantSpec, applied, degrade_cache, prune_options

transformers = lazy.module("transformers")


class Runner:
    def __init__(self, loaded: LoadedModel, options: RegressOptions) -> None:
        self.loaded = loaded
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.options = options
        self.device = next(self.model.parameters()).device
        self.forward_seconds = 0.0
        self.metric_seconds = 0.0
        self._quant: dict[str, Any] = {}  # quantized modules by artifact path, read once
        self._pruned: dict[tuple[str, str], tuple[list[int], int]] = {}
        self._base_gen: dict[tuple[int, ...], list[int]] = {}  # base continuations by ids
        self._plain_greedy = plain_greedy(self.model)
        self._eos = eos_ids(self.model, self.tokenizer)

    def fingerprint(self) -> str:
        return self.loaded.model_fingerprint

    def close(self) -> None:
        """Stop what the runner started (nothing here; engines in VllmRunner)."""

    def _tensor(self, ids: tuple[int, ...] | list[int]) -> torch.Tensor:
        return torch.tensor([list(ids)], device=self.device)

    @property
    def _gen_from_cache(self) -> bool:
        """Greedy tokens continue from the scored forward's cache (else generate() from start)."""
        return bool(self.options.gen_tokens) and self._plain_greedy

    @torch.no_grad()
    def base_rows(
        self, seqs: list[tuple[int, ...]], starts: list[int]
    ) -> tuple[list[torch.Tensor], list[list[int]]]:
        """The original model on `seqs` (one batched forward): logits from each start, and
        each sequence's greedy continuation (empty without --gen-tokens)."""
        started = time.perf_counter()
        rows = forward_rows(self.model, seqs, starts, keep_cache=self._gen_from_cache)
        for row, ids in enumerate(seqs):
            if ids not in self._base_gen and self._gen_from_cache:
                cache = row_cache(self.model, rows, row)
                self._base_gen[ids] = self._greedy(ids, cache)
        self.forward_seconds += time.perf_counter() - started
        return rows.logits, [self.base_generate(ids) for ids in seqs]

    def _greedy(self, ids: tuple[int, ...], cache: Any) -> list[int]:
        return greedy(self.model, self._tensor(ids), self.options.gen_tokens, self._eos, cache)

    def base_logits(self, case: Case) -> torch.Tensor:
        return self.base_rows([case.ids], [case.split])[0][0]

    @torch.no_grad()
    def variant_rows(
        self, spec: VariantSpec, cases: list[Case]
    ) -> list[tuple[torch.Tensor, list[int] | None]]:
        """`spec` on `cases`: per case its logits at the scored positions and its greedy
        continuation (None without --gen-tokens)."""
        started = time.perf_counter()
        with applied(spec, self.model, self.tokenizer, self._quant):
            if spec.kind("prune") is not None or spec.case_set == "prompts":
                out = self._batched_variant(spec, cases)
            else:
                out = [self._cached_variant(spec, case) for case in cases]
        self.forward_seconds += time.perf_counter() - started
        if not self.options.gen_tokens:
            return out
        return [  # generate() where the forward's cache is not the continuation's
            (logits, gen if gen is not None else self.generate(spec, case))
            for (logits, gen), case in zip(out, cases, strict=True)
        ]

    def _batched_variant(
        self, spec: VariantSpec, cases: list[Case]
    ) -> list[tuple[torch.Tensor, list[int] | None]]:
        if spec.kind("prune") is not None:
            pairs = [self._pruned_sequence(spec, case) for case in cases]
            seqs = [tuple(seq) for seq, _ in pairs]
            starts = [start for _, start in pairs]
        else:
            seqs, starts = [case.ids for case in cases], [case.split for case in cases]
        rows = forward_rows(self.model, seqs, starts, keep_cache=self._gen_from_cache)
        return [
            (
                rows.logits[row],
                self._greedy(ids, row_cache(self.model, rows, row))
                if self._gen_from_cache
                else None,
            )
            for row, ids in enumerate(seqs)
        ]

    def _cached_variant(
        self, spec: VariantSpec, case: Case
    ) -> tuple[torch.Tensor, list[int] | None]:
        """kv (the stored prefix) or kv-dtype (the first half's cache degraded), one case; a kv
        variant's continuation goes on from its cache (kv-dtype's degrades the whole prompt's
        cache first, so it is generated apart)."""
        cache = self._cache_for(spec, case, case.split)
        tail = self._tensor(case.ids[case.split :])
        logits = self.model(tail, **cache_kwargs(self.model, cache)).logits[0, :-1].float().cpu()
        if not (self._gen_from_cache and spec.kind("kv") is not None):
            return logits, None
        cache.crop(-1)  # greedy recomputes the last prompt token and goes on
        return logits, self._greedy(case.ids, cache)

    def _cache_for(self, spec: VariantSpec, case: Case, upto: int) -> Any:
        kv = spec.kind("kv")
        if kv is not None:
            return load_prefix(kv.arg, self.model, case.prefix)
        cache = transformers.DynamicCache()
        self.model(self._tensor(case.ids[:upto]), **cache_kwargs(self.model, cache))
        degrade_cache(cache, spec.kind("kv-dtype").arg)
        return cache

    def _pruned_sequence(self, spec: VariantSpec, case: Case) -> tuple[list[int], int]:
        """(pruned context ids + continuation ids, index where the continuation starts)."""

        key = (spec.name, case.id)
        if key not in self._pruned:
            context = self.tokenizer.decode(list(case.ids[: case.split]), skip_special_tokens=True)
            options = prune_options(spec.kind("prune").arg, context)
            text = prune_text(options, self.loaded).text
            ids = prompt_ids(self.tokenizer, text)
            self._pruned[key] = (ids + list(case.ids[case.split :]), len(ids))
        return self._pruned[key]

    @torch.no_grad()
    def generate(self, spec: VariantSpec | None, case: Case) -> list[int]:
        n = self.options.gen_tokens
        if n == 0:
            return []
        if spec is None:
            return self.base_generate(case.ids)
        started = time.perf_counter()
        if spec is not None and spec.kind("prune") is not None:
            sequence, start = self._pruned_sequence(spec, case)
            prompt = self._tensor(sequence[: start + len(case.ids) - case.split])
            with applied(spec, self.model, self.tokenizer, self._quant):
                out = self._decode(prompt, None)
        elif spec.case_set == "prompts":
            with applied(spec, self.model, self.tokenizer, self._quant):
                out = self._decode(self._tensor(case.ids), None)
        else:
            upto = case.split if spec.kind("kv") is not None else len(case.ids) - 1
            with applied(spec, self.model, self.tokenizer, self._quant):
                cache = self._cache_for(spec, case, upto)
                out = self._decode(self._tensor(case.ids), cache)
        self.forward_seconds += time.perf_counter() - started
        return out

    def base_generate(self, ids: tuple[int, ...]) -> list[int]:
        """The original model's greedy continuation of `ids`, computed once per run."""
        if not self.options.gen_tokens:
            return []
        if ids not in self._base_gen:
            started = time.perf_counter()
            self._base_gen[ids] = self._decode(self._tensor(ids), None)
            self.forward_seconds += time.perf_counter() - started
        return self._base_gen[ids]

    def _decode(self, ids: torch.Tensor, cache: Any | None) -> list[int]:
        """`gen_tokens` greedy tokens after `ids` (EOS kept out, as `min_new_tokens` does)."""
        n = self.options.gen_tokens
        if self._plain_greedy:
            return greedy(self.model, ids, n, self._eos, cache)
        kwargs: dict[str, Any] = {
            "max_new_tokens": n,
            "do_sample": False,
            "min_new_tokens": n,
            "pad_token_id": self.tokenizer.pad_token_id or 0,
            "attention_mask": torch.ones_like(ids),
        }
        if cache is not None:
            kwargs.update(cache_kwargs(self.model, cache))
        return self.model.generate(ids, **kwargs)[0, ids.shape[1] :].tolist()

    def compare(
        self, base: Any, logits: torch.Tensor, targets: torch.Tensor
    ) -> tuple[PositionMetrics, torch.Tensor]:
        started = time.perf_counter()
        if isinstance(base, torch.Tensor):
            metrics, base_top = compare_logits(base, logits, targets), base.argmax(-1)
        elif base.logprobs is not None:
            metrics = compare_logits(base.logprobs, logits, targets)
            base_top = base.logprobs.argmax(-1)
        else:
            metrics = compare_topk(
                base.topk_ids, base.topk_logprobs, base.target_logprob, logits, targets
            )
            base_top = base.topk_ids[:, 0]
        self.metric_seconds += time.perf_counter() - started
        return metrics, base_top
