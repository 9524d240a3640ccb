"""regress: score each variant against the original model, position by position."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from typing import Any

import torch

from copilot_cli import __version__
from copilot_cli.core import lazy, progress
from copilot_cli.core.artifacts import FINGERPRINT_SCHEME
from copilot_cli.core.errors import ArtifactError, InputError, Interrupted
from copilot_cli.core.executor import Work, open_executor
from copilot_cli.core.models import LoadedModel, context_length, load_model
from copilot_cli.core.options import OptionError
from copilot_cli.core.outputs import claim_file
from copilot_cli.core.prompt_sets import PromptCase, load_prompts, prompts_hash
from copilot_cli.regress.baseline import FORMAT as BASELINE_FORMAT
from copilot_cli.regress.baseline import Baseline, BaselineWriter
from copilot_cli.regress.cases import Case, build_cases, cases_hash
from copilot_cli.regress.engine import Runner
from copilot_cli.regress.gate import verdict
from copilot_cli.regress.options import RegressOptions
from copilot_cli.regress.reports import claim_reports, write_reports
from copilot_cli.regress.results import (
    GenerationStats,
    Provenance,
    RegressResult,
    Timing,
    VariantResult,
)
from copilot_cli.regress.tally import Tally, tallies_of
from copilot_cli.regress.units import CaseSet, Record, Unit, plan_units, score, score_worker
from copilot_cli.regress.variants import VariantSpec
from copilot_cli.regress.vllm_engine import VllmRunner

transformers = lazy.module("transformers")
llamacpp_engine = lazy.module("copilot_cli.regress.llamacpp_engine")

NULL_CONTROL = VariantSpec(name="null-control", components=())
# A reused baseline's recomputed cases may differ from it by float noise: at most a tenth of
# the gate's mean-KL threshold, and never less than this (nats).
BASELINE_KL_FLOOR = 1e-5
PARTIAL_EVERY = 15.0  # seconds between partial reports of a long run


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
    `options.reports` names (as it goes: a partial report every PARTIAL_EVERY seconds, and one
    when interrupted). Loads `options.model` when no model is handed in.

    Raises:
        InputError / OptionError: malformed prompts or variants, a count the model cannot do.
        ArtifactError / FingerprintMismatch: a baseline or variant artifact made for something
            else.
        Interrupted: Ctrl-C, after the partial reports are written.
    """
    _claim_outputs(options)
    if loaded is None:
        with progress.progress("loading model"):
            loaded = load_model(options.model)
    _check_against_model(options, loaded)
    prompts = load_prompts(options.prompts)
    runner = _runner(loaded, options)
    try:
        return _run(runner, options, loaded, prompts)
    finally:
        runner.close()


def _runner(loaded: LoadedModel, options: RegressOptions) -> Runner:
    if options.engine == "vllm":
        return VllmRunner(loaded, options)
    if options.engine == "llama.cpp":
        return llamacpp_engine.LlamaCppRunner(loaded, options)
    return Runner(loaded, options)


def _run(
    runner: Runner, options: RegressOptions, loaded: LoadedModel, prompts: list[PromptCase]
) -> RegressResult:
    specs = [*options.specs, *([NULL_CONTROL] if options.null_control else [])]
    writer = BaselineWriter(options.baseline_topk) if options.save_baseline else None
    sets = _case_sets(runner, specs, prompts, _baseline(options, loaded, prompts), writer)

    def result_of(tallies: dict[str, Tally], partial: str | None = None) -> RegressResult:
        return _result(
            runner, [s for s in specs if tallies[s.name].prompt_kl], tallies, prompts, partial
        )

    # on Ray the cluster run draws its own bar, with counts
    bar = progress.progress(f"scoring {len(specs)} variants", total=0) if not options.ray else None
    with bar or contextlib.nullcontext() as task:
        tallies = _score(runner, specs, sets, writer, task, _PartialReports(options, result_of))
    _require_scored(tallies, options)
    result = result_of(tallies)
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


class _PartialReports:
    """Writes the reports of the cases finished so far, marked partial, at most every
    PARTIAL_EVERY seconds and once more when the run is interrupted."""

    def __init__(self, options: RegressOptions, result_of: Any) -> None:
        self.paths = options.reports
        self.result_of = result_of
        self.last = time.monotonic()
        self.wanted = any(getattr(self.paths, n) for n in ("json", "junit", "markdown", "html"))

    def __call__(self, tallies_fn: Any, note: str, *, now: bool = False) -> None:
        if not self.wanted or not (now or time.monotonic() - self.last >= PARTIAL_EVERY):
            return
        write_reports(self.result_of(tallies_fn(), note), self.paths)
        self.last = time.monotonic()


def _baseline(
    options: RegressOptions, loaded: LoadedModel, prompts: list[PromptCase]
) -> Baseline | None:
    if options.baseline is None:
        return None
    return Baseline(
        options.baseline,
        model_fingerprint=loaded.model_fingerprint,
        tokenizer_fingerprint=loaded.tokenizer_fingerprint,
        prompts_hash=prompts_hash(prompts),
    )


def _result(
    runner: Runner,
    specs: list[VariantSpec],
    tallies: dict[str, Tally],
    prompts: list[PromptCase],
    partial: str | None = None,
) -> RegressResult:
    options = runner.options
    return RegressResult(
        variants=[_variant_result(spec, tallies[spec.name], options) for spec in specs],
        thresholds=options.thresholds,
        provenance=_provenance(runner.loaded, options, prompts),
        timing=Timing(
            forward_seconds=round(runner.forward_seconds, 3),
            metric_seconds=round(runner.metric_seconds, 3),
            metric_share=round(runner.metric_seconds / max(runner.forward_seconds, 1e-9), 4),
        ),
        partial=partial,
    )


def _require_scored(tallies: dict[str, Tally], options: RegressOptions) -> None:
    empty = [name for name, tally in tallies.items() if not tally.prompt_kl]
    if empty:
        raise InputError(
            f"nothing to score for {', '.join(empty)}: every prompt is shorter than 2 tokens "
            "(after the split or the stored prefix)",
            where=str(options.prompts),
        )


def _case_sets(
    runner: Runner,
    specs: list[VariantSpec],
    prompts: list[PromptCase],
    baseline: Baseline | None,
    writer: BaselineWriter | None,
) -> list[CaseSet]:
    """Every case set a variant is scored on (prompts alone when only saving a baseline),
    a reused baseline required to hold each and checked against the model."""
    names = sorted({s.case_set for s in specs} | ({"prompts"} if writer and not specs else set()))
    context = context_length(runner.model.config)
    sets = []
    for name in names:
        cases = build_cases(name, prompts, runner.tokenizer, runner.options.max_tokens, context)
        set_hash = cases_hash(cases)
        bases = {}
        if baseline is not None:
            baseline.require(set_hash, len(cases), name)
            bases = {i: baseline.case(set_hash, i) for i, c in enumerate(cases) if c.scored > 0}
            check_baseline(runner, baseline, cases, bases)
        members = tuple(s for s in specs if s.case_set == name)
        sets.append(CaseSet(name, cases, set_hash, members, bases))
    return sets


def _score(
    runner: Runner,
    specs: list[VariantSpec],
    sets: list[CaseSet],
    writer: BaselineWriter | None,
    task: Any = None,
    on_part: Any = None,
) -> dict[str, Tally]:
    """Every variant on its case set, in units of batched cases (each original forward
    computed or read once for every set on the same ids); records come from this process or
    from Ray actors and are added in case order. `on_part(tallies, note)` sees the tallies as
    they grow. Ctrl-C ends it with what was finished (Interrupted, exit 130)."""
    vocab = runner.model.get_output_embeddings().weight.shape[0]
    units = plan_units(sets, runner.options.batch_size, vocab)
    total = sum(unit.size for unit in units)
    if task is not None:
        task.update(total=total)
    records: dict[tuple[str, int], Record] = {}
    try:
        for unit, scored in _scored(runner, units, writer):
            records.update(((name, index), record) for name, index, record in scored)
            if task is not None:
                task.advance(unit.size)
            if on_part is not None:
                on_part(
                    lambda: tallies_of(sets, specs, records, runner.tokenizer),
                    _progress_note(len(records), total),
                )
    except KeyboardInterrupt:
        tallies = tallies_of(sets, specs, records, runner.tokenizer)
        said = _finished(tallies, len(records), total)
        if on_part is not None:
            on_part(lambda: tallies, said, now=True)
        raise Interrupted(said) from None
    return tallies_of(sets, specs, records, runner.tokenizer)


def _scored(
    runner: Runner, units: list[Unit], writer: BaselineWriter | None
) -> Iterator[tuple[Unit, list[tuple[str, int, Record]]]]:
    """(unit, its records) for every unit in order, scored here or on Ray actors; the model
    time and the baseline tensors of units scored elsewhere added to this run's."""
    threads = torch.get_num_threads()
    topk = writer.topk if writer is not None else None
    forward, metric = runner.forward_seconds, runner.metric_seconds
    with open_executor(runner.options.ray) as executor:
        work = Work(
            f"scoring {sum(unit.size for unit in units)} cases",
            [(unit, topk) for unit in units],
            score_worker,
            score,
            (runner.options, threads),
            here=runner,
            fingerprint=runner.fingerprint(),
            weight=lambda job: float(job[0].size),
            threads=threads,
            gpus=str(runner.options.model.device).startswith("cuda"),
            max_workers=len(units),
        )
        for unit, scored in zip(units, executor.map(work), strict=True):
            forward, metric = forward + scored.forward_seconds, metric + scored.metric_seconds
            runner.forward_seconds, runner.metric_seconds = forward, metric
            if writer is not None:
                writer.tensors.update(scored.tensors)
                for key, count in scored.sets.items():
                    writer.sets[key] = max(writer.sets.get(key, 0), count)
            yield unit, scored.records


def _progress_note(done: int, total: int) -> str:
    return f"{done} of {total} cases scored"


def _finished(tallies: dict[str, Tally], done: int, total: int) -> str:
    parts = [
        f"{name}: mean KL {tally.all.summary().kl_mean:.3g} over {len(tally.prompt_kl)} cases"
        for name, tally in tallies.items()
        if tally.prompt_kl
    ]
    return f"interrupted after {done} of {total} cases" + (
        f" ({'; '.join(parts)}; no verdict from a part)" if parts else ""
    )


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
        same_gen = (
            not runner.options.gen_tokens or runner.base_generate(case.ids) == stored.generated
        )
        if not (kl <= tolerance and same_gen):  # NaN fails too
            what = f"mean KL {kl:.3g} > {tolerance:.1g}" if same_gen else "greedy continuation"
            raise ArtifactError(
                f"does not match the model: case {case.id!r} recomputed differs ({what}); it "
                "was edited, or made with another model or settings: save a new baseline",
                where=str(baseline.path),
            )


def _variant_result(spec: VariantSpec, tally: Tally, options: RegressOptions) -> VariantResult:
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
    loaded: LoadedModel, options: RegressOptions, prompts: list[PromptCase]
) -> Provenance:
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
        baseline_check=options.baseline_check if options.baseline else None,
    )
