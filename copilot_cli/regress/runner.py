"""regress: score each variant against the original model, position by position."""

from __future__ import annotations

import contextlib
import random
import time
from typing import Any

import torch

from copilot_cli import __version__
from copilot_cli.core import progress
from copilot_cli.core.artifacts import FINGERPRINT_SCHEME
from copilot_cli.core.errors import ArtifactError, InputError, Interrupted
from copilot_cli.core.metrics import (
    Accumulator,
    PositionMetrics,
    compare_logits,
    compare_topk,
)
from copilot_cli.core.models import LoadedModel, cache_kwargs, context_length, load_model
from copilot_cli.core.options import OptionError
from copilot_cli.core.outputs import claim_file
from copilot_cli.core.prompt_sets import load_prompts, prompts_hash
from copilot_cli.regress.baseline import FORMAT as BASELINE_FORMAT
from copilot_cli.regress.baseline import Baseline, BaselineWriter
from copilot_cli.regress.cases import Case, build_cases, cases_hash
from copilot_cli.regress.decode import eos_ids, greedy, plain_greedy
from copilot_cli.regress.gate import verdict
from copilot_cli.regress.options import RegressOptions
from copilot_cli.regress.reports import claim_reports, write_reports
from copilot_cli.regress.results import (
    GenerationStats,
    Provenance,
    RegressResult,
    Timing,
    VariantResult,
    WorstPosition,
)
from copilot_cli.regress.textmetrics import bleu4, levenshtein
from copilot_cli.regress.variants import VariantSpec, applied, degrade_cache, prune_options

NULL_CONTROL = VariantSpec(name="null-control", components=())
# A reused baseline's recomputed cases may differ from it by float noise: at most a tenth of
# the gate's mean-KL threshold, and never less than this (nats).
BASELINE_KL_FLOOR = 1e-5


class _Tally:
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

    def _tensor(self, ids: tuple[int, ...] | list[int]) -> torch.Tensor:
        return torch.tensor([list(ids)], device=self.device)

    @torch.no_grad()
    def base_logits(self, case: Case) -> torch.Tensor:
        started = time.perf_counter()
        logits = self.model(self._tensor(case.ids)).logits[0, case.split : len(case.ids) - 1]
        self.forward_seconds += time.perf_counter() - started
        return logits.float().cpu()

    def _cache_for(self, spec: VariantSpec, case: Case, upto: int) -> Any:
        from transformers import DynamicCache

        kv = spec.kind("kv")
        if kv is not None:
            from copilot_cli.kv import load_prefix

            return load_prefix(kv.arg, self.model, case.prefix)
        cache = DynamicCache()
        self.model(self._tensor(case.ids[:upto]), **cache_kwargs(self.model, cache))
        degrade_cache(cache, spec.kind("kv-dtype").arg)
        return cache

    def _pruned_sequence(self, spec: VariantSpec, case: Case) -> tuple[list[int], int]:
        """(pruned context ids + continuation ids, index where the continuation starts)."""
        from copilot_cli.core.tokens import prompt_ids
        from copilot_cli.prune import prune_text

        key = (spec.name, case.id)
        if key not in self._pruned:
            context = self.tokenizer.decode(list(case.ids[: case.split]), skip_special_tokens=True)
            options = prune_options(spec.kind("prune").arg, context)
            text = prune_text(options, self.loaded).text
            ids = prompt_ids(self.tokenizer, text)
            self._pruned[key] = (ids + list(case.ids[case.split :]), len(ids))
        return self._pruned[key]

    @torch.no_grad()
    def variant_logits(self, spec: VariantSpec, case: Case) -> torch.Tensor:
        started = time.perf_counter()
        with applied(spec, self.model, self.tokenizer, self._quant):
            if spec.kind("prune") is not None:
                sequence, start = self._pruned_sequence(spec, case)
                logits = self.model(self._tensor(sequence)).logits[0, start:-1]
            elif spec.case_set == "prompts":
                logits = self.model(self._tensor(case.ids)).logits[0, case.split : -1]
            else:
                cache = self._cache_for(spec, case, case.split)
                logits = self.model(
                    self._tensor(case.ids[case.split :]), **cache_kwargs(self.model, cache)
                ).logits[0, :-1]
        self.forward_seconds += time.perf_counter() - started
        return logits.float().cpu()

    @torch.no_grad()
    def generate(self, spec: VariantSpec | None, case: Case) -> list[int]:
        n = self.options.gen_tokens
        if n == 0:
            return []
        if spec is None and case.ids in self._base_gen:  # the same ids in another case set
            return self._base_gen[case.ids]
        started = time.perf_counter()
        if spec is not None and spec.kind("prune") is not None:
            sequence, start = self._pruned_sequence(spec, case)
            prompt = self._tensor(sequence[: start + len(case.ids) - case.split])
            with applied(spec, self.model, self.tokenizer, self._quant):
                out = self._decode(prompt, None)
        elif spec is None or spec.case_set == "prompts":
            with applied(spec or NULL_CONTROL, self.model, self.tokenizer, self._quant):
                out = self._decode(self._tensor(case.ids), None)
        else:
            upto = case.split if spec.kind("kv") is not None else len(case.ids) - 1
            with applied(spec, self.model, self.tokenizer, self._quant):
                cache = self._cache_for(spec, case, upto)
                out = self._decode(self._tensor(case.ids), cache)
        self.forward_seconds += time.perf_counter() - started
        if spec is None:
            self._base_gen[case.ids] = out
        return out

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


def _generation_stats(rows: list[tuple[bool, float, float]]) -> GenerationStats | None:
    if not rows:
        return None
    n = len(rows)
    return GenerationStats(
        continuations=n,
        exact_match=sum(r[0] for r in rows) / n,
        bleu4=sum(r[1] for r in rows) / n,
        levenshtein=sum(r[2] for r in rows) / n,
    )


def _check_against_model(options: RegressOptions, loaded: LoadedModel) -> None:
    """Counts the model itself bounds: generated tokens by its context, top-k by its vocab."""
    context = context_length(loaded.config)
    if options.gen_tokens + 1 >= context:
        raise OptionError(
            "gen_tokens", f"{options.gen_tokens} does not fit the model's context of {context}"
        )
    vocab = loaded.model.get_output_embeddings().weight.shape[0]
    if options.baseline_topk > vocab:
        raise OptionError(
            "baseline_topk", f"{options.baseline_topk} is more than the vocabulary ({vocab})"
        )


def _claim_outputs(options: RegressOptions) -> None:
    """Before any work: every file this run writes is new or a report/baseline of ours."""
    inputs = tuple(p for p in (options.prompts, options.baseline) if p is not None)
    claim_reports(options.reports, inputs)
    claim_file(
        options.save_baseline,
        "save_baseline",
        fmt=BASELINE_FORMAT,
        label="regress baseline",
        inputs=inputs,
    )


def run_regress(options: RegressOptions, loaded: LoadedModel | None = None) -> RegressResult:
    """Compare every variant with the original model; save or use a baseline; write the reports
    `options.reports` names. Loads `options.model` when no model is handed in.

    Raises:
        InputError / OptionError: malformed prompts or variants, a count the model cannot do.
        ArtifactError / FingerprintMismatch: a baseline or variant artifact made for something
            else.
    """
    _claim_outputs(options)
    if loaded is None:
        with progress.progress("loading model"):
            loaded = load_model(options.model)
    _check_against_model(options, loaded)
    prompts = load_prompts(options.prompts)
    runner = Runner(loaded, options)
    specs = [*options.specs, *([NULL_CONTROL] if options.null_control else [])]
    baseline = (
        Baseline(
            options.baseline,
            model_fingerprint=loaded.model_fingerprint,
            tokenizer_fingerprint=loaded.tokenizer_fingerprint,
            prompts_hash=prompts_hash(prompts),
        )
        if options.baseline is not None
        else None
    )
    writer = BaselineWriter(options.baseline_topk) if options.save_baseline else None
    # on Ray the cluster run draws its own bar, with counts
    bar = progress.progress(f"scoring {len(specs)} variants", total=0) if not options.ray else None
    with bar or contextlib.nullcontext() as task:
        tallies = _score(runner, specs, prompts, baseline, writer, task)
    _require_scored(tallies, options)
    result = RegressResult(
        variants=[_variant_result(spec, tallies[spec.name], options) for spec in specs],
        thresholds=options.thresholds,
        provenance=_provenance(loaded, options, prompts),
        timing=Timing(
            forward_seconds=round(runner.forward_seconds, 3),
            metric_seconds=round(runner.metric_seconds, 3),
            metric_share=round(runner.metric_seconds / max(runner.forward_seconds, 1e-9), 4),
        ),
    )
    if writer is not None:
        writer.save(
            options.save_baseline,
            {
                "model_fingerprint": loaded.model_fingerprint,
                "tokenizer_fingerprint": loaded.tokenizer_fingerprint,
                "fingerprint_scheme": FINGERPRINT_SCHEME,
                "prompts_hash": result.provenance.prompts_hash,
                "gen_tokens": options.gen_tokens,
            },
        )
        result.baseline_saved = str(options.save_baseline)
    result.reports_written = write_reports(result, options.reports)
    return result


def _require_scored(tallies: dict[str, _Tally], options: RegressOptions) -> None:
    empty = [name for name, tally in tallies.items() if not tally.prompt_kl]
    if empty:
        raise InputError(
            f"nothing to score for {', '.join(empty)}: every prompt is shorter than 2 tokens "
            "(after the split or the stored prefix)",
            where=str(options.prompts),
        )


def _score(
    runner: Runner,
    specs: list[VariantSpec],
    prompts: list[dict[str, Any]],
    baseline: Baseline | None,
    writer: BaselineWriter | None,
    task: Any = None,
) -> dict[str, _Tally]:
    """Every variant on its case set, each case's base computed (or read) once; the records
    come from this process or from Ray actors, and are merged here in case order. Ctrl-C
    ends it with what was finished (Interrupted, exit 130)."""
    sets = sorted({s.case_set for s in specs} | ({"prompts"} if writer and not specs else set()))
    tallies = {s.name: _Tally() for s in specs}
    counts = [0, 0]  # cases done, cases planned so far
    try:
        for case_set in sets:
            _score_set(runner, specs, prompts, baseline, writer, case_set, tallies, task, counts)
    except KeyboardInterrupt:
        raise Interrupted(_finished(tallies, counts)) from None
    return tallies


def _finished(tallies: dict[str, _Tally], counts: list[int]) -> str:
    done = [
        f"{name}: mean KL {tally.all.summary().kl_mean:.3g} over {len(tally.prompt_kl)} cases"
        for name, tally in tallies.items()
        if tally.prompt_kl
    ]
    return f"interrupted after {counts[0]} of {counts[1]}+ cases" + (
        f" ({'; '.join(done)}; no verdict from a part)" if done else ""
    )


def _score_set(
    runner: Runner,
    specs: list[VariantSpec],
    prompts: list[dict[str, Any]],
    baseline: Baseline | None,
    writer: BaselineWriter | None,
    case_set: str,
    tallies: dict[str, _Tally],
    task: Any,
    counts: list[int],
) -> None:
    options = runner.options
    cases = build_cases(
        case_set,
        prompts,
        runner.tokenizer,
        options.max_tokens,
        context_length(runner.model.config),
    )
    set_hash = cases_hash(cases)
    if baseline is not None:
        baseline.require(set_hash, len(cases), case_set)
    members = [s for s in specs if s.case_set == case_set]
    work = [i for i, case in enumerate(cases) if case.scored > 0]
    bases = {i: baseline.case(set_hash, i) for i in work} if baseline is not None else {}
    if bases:
        check_baseline(runner, baseline, cases, bases)
    if options.ray is None:
        records: Any = (
            (i, case_record(runner, cases[i], i, set_hash, members, bases.get(i), writer))
            for i in work
        )
    else:
        from copilot_cli.regress.distributed import score_on_ray

        records = score_on_ray(runner, cases, work, set_hash, members, bases, writer)
    counts[1] += len(work)
    if task is not None:
        task.update(total=counts[1])
    for index, record in records:
        for spec in members:
            metrics, base_top, var_top, gen_row = record[spec.name]
            tallies[spec.name].add(cases[index], metrics, base_top, var_top, runner.tokenizer)
            if gen_row is not None:
                tallies[spec.name].gen.append(gen_row)
        counts[0] += 1
        if task is not None:
            task.advance()


def check_baseline(runner: Runner, baseline: Any, cases: list[Case], bases: dict[int, Any]) -> None:
    """Recompute `baseline_check` cases, drawn at random (a forger cannot know which), with
    the loaded model: their log-probs (and greedy continuation) must be what the baseline holds.

    Raises:
        ArtifactError: "does not match the model": edited and resealed, or made otherwise.
    """
    count = min(runner.options.baseline_check, len(bases))
    tolerance = max(BASELINE_KL_FLOOR, runner.options.thresholds.max_mean_kl / 10)
    for index in sorted(random.SystemRandom().sample(sorted(bases), count)):
        case, stored = cases[index], bases[index]
        targets = torch.tensor(case.ids[case.split + 1 :])
        metrics, _ = runner.compare(stored, runner.base_logits(case), targets)
        kl = float(metrics.kl.mean()) if metrics.kl.numel() else 0.0
        same_gen = not runner.options.gen_tokens or runner.generate(None, case) == stored.generated
        if not (kl <= tolerance and same_gen):  # NaN fails too
            what = f"mean KL {kl:.3g} > {tolerance:.1g}" if same_gen else "greedy continuation"
            raise ArtifactError(
                f"does not match the model: case {case.id!r} recomputed differs ({what}); it "
                "was edited, or made with another model or settings: save a new baseline",
                where=str(baseline.path),
            )


def case_record(
    runner: Runner,
    case: Case,
    index: int,
    set_hash: str,
    members: list[VariantSpec],
    base_case: Any,
    writer: BaselineWriter | None,
) -> dict[str, tuple[PositionMetrics, torch.Tensor, torch.Tensor, Any]]:
    """One case scored against every variant of its set: per variant the position metrics,
    base and variant top-1 ids and the generation row (None without generation). A pure
    function of its inputs: the same on any machine that runs it."""
    targets = torch.tensor(case.ids[case.split + 1 :])
    if base_case is not None:
        base: Any = base_case
        base_gen = base_case.generated
    else:
        base = runner.base_logits(case)
        base_gen = runner.generate(None, case)
        if writer is not None:
            writer.add(set_hash, index, base, targets, base_gen)
    record = {}
    for spec in members:
        logits = runner.variant_logits(spec, case)
        metrics, base_top = runner.compare(base, logits, targets)
        gen_row = None
        if runner.options.gen_tokens:
            gen = runner.generate(spec, case)
            gen_row = (gen == base_gen, bleu4(base_gen, gen), levenshtein(base_gen, gen))
        record[spec.name] = (metrics, base_top, logits.argmax(-1), gen_row)
    return record


def _variant_result(spec: VariantSpec, tally: _Tally, options: RegressOptions) -> VariantResult:
    summary = tally.all.summary()
    generation = _generation_stats(tally.gen)
    gen_dict = None if generation is None else generation.__dict__
    return VariantResult(
        name=spec.name,
        spec=spec.spec or "(base)",
        case_set=spec.case_set,
        summary=summary,
        groups={g: a.summary() for g, a in tally.groups.items()},
        prompt_kl=tally.prompt_kl,
        generation=generation,
        worst=tally.worst,
        failures=verdict(summary, tally.prompt_kl, gen_dict, options.thresholds),
        kl_values=[float(v) for v in tally.all.values("kl")],
        position_kl=tally.position_kl,
        case_group=tally.case_group,
    )


def _provenance(
    loaded: LoadedModel, options: RegressOptions, prompts: list[dict[str, Any]]
) -> Provenance:
    import transformers

    return Provenance(
        copilot_opt_version=__version__,
        torch_version=torch.__version__,
        transformers_version=transformers.__version__,
        model=loaded.source,
        model_fingerprint=loaded.model_fingerprint,
        tokenizer_fingerprint=loaded.tokenizer_fingerprint,
        prompts=str(options.prompts),
        prompts_hash=prompts_hash(prompts),
        prompt_count=len(prompts),
        baseline=str(options.baseline) if options.baseline else None,
        gen_tokens=options.gen_tokens,
        max_tokens=options.max_tokens,
    )
