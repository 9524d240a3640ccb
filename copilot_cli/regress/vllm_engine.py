"""regress --engine vllm: every variant computed by vLLM, the original by transformers.

A variant is an engine (vLLM with its options: KV cache dtype, dtype, quantization, another
checkpoint) and optionally our connector serving a prefill-kv folder. Each case is one vLLM
request for its prompt token ids that asks for prompt log-probabilities (the distribution at
every prompt position) and, with --gen-tokens, greedy tokens. Scores:

* `logprobs:full` (the default where the vocabulary has at most FULL_VOCAB tokens): the whole
  distribution at every scored position; KL and every statistic are exact.
* `logprobs:K`: the engine's own K most likely tokens plus the target; KL is the sum over them
  plus a lower bound for the rest (core/metrics.compare_sparse), so a lower bound in all. (vLLM's
  `prompt_logprob_token_ids`, which would score the original's own top-k ids, needs the V2
  model runner, which needs Triton: not on CPU builds.)

A prompt log-probability request normally skips vLLM's prefix reuse; here the connector's
prefix is read anyway (`skip_reading_prefix_cache=False`), and only positions the engine
computed are scored: a case whose scored positions the connector served is refused.
Engines start once per distinct configuration and stay up for the run (`close` stops them);
their logs go to stderr, so a JSON report on stdout stays clean.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import time
from pathlib import Path
from typing import Any

import torch

from copilot_cli.core import lazy
from copilot_cli.core.errors import InputError
from copilot_cli.core.metrics import PositionMetrics, SparseLogprobs, compare_sparse
from copilot_cli.core.models import DTYPE_NAMES
from copilot_cli.core.options import OptionError
from copilot_cli.core.progress import stdout_to_stderr
from copilot_cli.regress.cases import Case
from copilot_cli.regress.engine import Runner
from copilot_cli.regress.variants import VariantSpec, engine_options
from copilot_cli.serving import ServeOptions, check, local_folder, transfer_config

vllm = lazy.module("vllm")

FULL_VOCAB = 65536  # logprobs:full by default up to this vocabulary, else DEFAULT_TOPK
DEFAULT_TOPK = 1024  # measured: docs/regress.md (top-k vs the exact KL)


class VllmRunner(Runner):
    """The transformers Runner for the original (and the null control); vLLM for variants."""

    def __init__(self, loaded: Any, options: Any) -> None:
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # before vllm loads
        if importlib.util.find_spec("vllm") is None:
            raise OptionError(
                "engine", "vllm is not installed here (make vllm-env, then run in .venv-vllm)"
            )
        super().__init__(loaded, options)
        self.vocab = self.model.get_output_embeddings().weight.shape[0]
        self._engines: dict[tuple[Any, ...], Any] = {}

    def variant_rows(
        self, spec: VariantSpec, cases: list[Case]
    ) -> list[tuple[Any, list[int] | None]]:
        if not spec.components:
            return super().variant_rows(spec, cases)
        engine, topk = self._engine(spec)
        gen = self.options.gen_tokens
        params = vllm.SamplingParams(
            max_tokens=max(gen, 1),
            min_tokens=gen,
            temperature=0.0,
            prompt_logprobs=-1 if topk is None else topk,
            skip_reading_prefix_cache=False,
            detokenize=False,
        )
        started = time.perf_counter()
        requests = [{"prompt_token_ids": list(case.ids)} for case in cases]
        outputs = engine.generate(requests, params, use_tqdm=False)
        self.forward_seconds += time.perf_counter() - started
        return [
            (self._scores(spec, case, out, topk), list(out.outputs[0].token_ids) if gen else None)
            for case, out in zip(cases, outputs, strict=True)
        ]

    def _scores(self, spec: VariantSpec, case: Case, out: Any, topk: int | None) -> Any:
        """The variant at the case's scored positions: dense log-probs, or SparseLogprobs."""
        if out.num_cached_tokens > case.split:
            raise InputError(
                f"variant {spec.name}: the connector served {out.num_cached_tokens} tokens of "
                f"case {case.id!r}, past its {case.split} prefix tokens (scored positions "
                "must be computed by the engine): the folder holds a longer prefix",
                where=str(self.options.prompts),
            )
        rows = out.prompt_logprobs[case.split + 1 : len(case.ids)]
        if topk is None:
            return _dense(rows, self.vocab)
        return _sparse(rows, case.ids[case.split + 1 :], topk)

    def compare(
        self, base: Any, logits: Any, targets: torch.Tensor
    ) -> tuple[PositionMetrics, torch.Tensor]:
        if not isinstance(logits, SparseLogprobs):
            return super().compare(base, logits, targets)
        started = time.perf_counter()
        if not isinstance(base, torch.Tensor):
            if base.logprobs is None:
                raise OptionError(
                    "baseline",
                    "a top-k baseline cannot score a vLLM top-k variant: save the baseline "
                    "with the full vocabulary (--baseline-topk 0) or use logprobs:full",
                )
            base = base.logprobs
        metrics = compare_sparse(base, logits, targets)
        self.metric_seconds += time.perf_counter() - started
        return metrics, base.argmax(-1)

    def _engine(self, spec: VariantSpec) -> tuple[Any, int | None]:
        """The engine of `spec` (started on first use) and its top-k (None: full)."""
        component = spec.kind("vllm")
        values = engine_options(component.arg if component is not None else "default")
        kv = spec.kind("kv")
        engine = {k: v for k, v in values.items() if k != "logprobs"}  # the same engine
        key = (tuple(sorted(engine.items())), kv.arg if kv is not None else None)
        if key not in self._engines:
            self._engines[key] = start_engine(self.loaded, values, kv.arg if kv else None)
        logprobs = values.get("logprobs")
        if logprobs is None:
            return self._engines[key], None if self.vocab <= FULL_VOCAB else DEFAULT_TOPK
        return self._engines[key], None if logprobs == "full" else int(logprobs)

    def close(self) -> None:
        with stdout_to_stderr():
            for engine in self._engines.values():
                with contextlib.suppress(Exception):
                    engine.llm_engine.engine_core.shutdown()
        self._engines.clear()


def start_engine(loaded: Any, values: dict[str, str], kv_dir: str | None) -> Any:
    """A vLLM engine for the original model's folder (or `values["model"]`), in the
    original's dtype unless told, with the connector when `kv_dir` is given (the folder
    checked against the model first, as serve does)."""
    folder = values.get("model") or str(local_folder(loaded.source))
    kwargs: dict[str, Any] = {}
    dtype = values.get("dtype") or DTYPE_NAMES[next(loaded.model.parameters()).dtype]
    if kv_dir is not None:
        serve = ServeOptions(kv_dir=Path(kv_dir), model=folder)
        check(serve)
        kwargs["kv_transfer_config"] = transfer_config(serve)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's CPU default is larger
    with stdout_to_stderr():
        return vllm.LLM(
            model=folder,
            dtype=dtype,
            kv_cache_dtype=values.get("kv-cache-dtype", "auto"),
            quantization=values.get("quantization"),
            enforce_eager=True,
            enable_prefix_caching=False,
            max_logprobs=-1,
            seed=0,
            **kwargs,
        )


def _dense(rows: list[dict[int, Any]], vocab: int) -> torch.Tensor:
    """[positions, vocab] log-probabilities (float64) from full prompt log-probs."""
    out = torch.full((len(rows), vocab), -torch.inf, dtype=torch.float64)
    for row, entries in enumerate(rows):
        ids = torch.tensor(list(entries), dtype=torch.long)
        if int(ids.max()) >= vocab:
            raise InputError(f"vLLM returned token id {int(ids.max())} past the vocabulary")
        out[row, ids] = torch.tensor([e.logprob for e in entries.values()], dtype=out.dtype)
    return out


def _sparse(rows: list[dict[int, Any]], targets: tuple[int, ...], k: int) -> SparseLogprobs:
    """The engine's top-k (best first) plus each row's target, padded to k + 1 columns; the
    k-th best log-probability caps every unlisted id's."""
    ids = torch.full((len(rows), k + 1), -1, dtype=torch.long)
    values = torch.full((len(rows), k + 1), -torch.inf, dtype=torch.float64)
    for row, (entries, target) in enumerate(zip(rows, targets, strict=True)):
        ranked = sorted(entries.items(), key=lambda item: (item[1].rank, item[0]))
        if len(ranked) > k + 1:  # ties in rank: the first k, and the target wherever it is
            ranked = ranked[:k] + [item for item in ranked[k:] if item[0] == target][:1]
        ids[row, : len(ranked)] = torch.tensor([token for token, _ in ranked])
        values[row, : len(ranked)] = torch.tensor(
            [e.logprob for _, e in ranked], dtype=values.dtype
        )
    return SparseLogprobs(ids, values, cap=values[:, k - 1].clone())
