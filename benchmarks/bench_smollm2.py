"""The real model: SmolLM2-135M-Instruct (copilot_cli.instruments; a pretrained Llama with code
in its training mix, GGUF Q4_1 dequantized to float32) as the instrument for prefill-kv,
quantize and regress, one run. Needs `make real-models` (else skipped).

- prefill-kv --verify on the shipped templates compiled for SmolLM2's tokenizer: cached vs
  recomputed logits, float32 and bfloat16, each against its dtype's tolerance;
- TTFT of a 1,024-token prefix of real code + 32 tokens: the stored KV loaded (warm, as a
  server runs) vs a full prefill, and vs the limit: the 32 tokens' forward over a cache already
  in memory;
- quantize INT8 and INT4 (+ kept FP16 rows) of the tied 49,152 x 576 table, the output layer
  left in float (the default) and quantized with it (--include-lm-head: tied, so one table
  serves both): mean KL on the 34 sample prompts, bytes vs FP16;
- regress verdicts: variants that must pass (KV from our folder, INT8 embeddings, an int8 KV
  cache: on this model its mean KL is 1.6e-4) and must fail (INT4 of the tied table with no
  kept rows, half of each prompt pruned), under the default thresholds and with
  --min-same-top1 0.98.
"""

from __future__ import annotations

import sys
import sysconfig
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit, interleaved_seconds

from copilot_cli import instruments
from copilot_cli.core.models import ModelSpec, load_model, truncate
from copilot_cli.kv import PrefillOptions, PrefixSource, load_prefix, prefill_kv, prefill_sources
from copilot_cli.prompts import CompileOptions, compile_templates
from copilot_cli.quant import QuantizeOptions, quantize_embeddings
from copilot_cli.regress import RegressOptions, Thresholds, run_regress
from copilot_cli.regress.gate import verdict

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ROOT / "sample_data" / "prompts.jsonl"


def verify_rows(smollm2: Path, tmp: Path) -> None:
    bundle = tmp / "bundle"
    compile_templates(CompileOptions(ROOT / "templates", bundle, tokenizer=str(smollm2)))
    for dtype in ("float32", "bfloat16"):
        loaded = load_model(ModelSpec(str(smollm2), dtype="auto" if dtype == "float32" else dtype))
        result = prefill_kv(
            PrefillOptions(out=tmp / f"kv-{dtype}", bundle=bundle, dtype=dtype, verify=True),
            loaded,
        )
        worst = max(result.verify, key=lambda v: v.max_abs_diff / v.tolerance)
        emit(
            f"prefill-kv --verify on SmolLM2-135M, {dtype}: worst cached-vs-recomputed logit "
            "difference vs its tolerance",
            worst.max_abs_diff,
            worst.tolerance,
            "abs logit",
            goal="every prefix within its dtype's tolerance",
            passed=all(v.passed for v in result.verify),
            note=f"{len(result.verify)} prefixes of the shipped templates, "
            f"{result.distinct_tokens} distinct tokens; worst {worst.name}, greedy agreement "
            f"{min(v.greedy_agreement for v in result.verify):.3f} (lowest)",
        )


def ttft_rows(loaded, tmp: Path) -> None:
    text = (Path(sysconfig.get_paths()["stdlib"]) / "argparse.py").read_text()
    ids = loaded.tokenizer(text, add_special_tokens=False).input_ids
    prefix, dynamic = ids[:1024], ids[1024:1056]
    kv_dir = tmp / "kv-ttft"
    prefill_sources(
        loaded,
        [PrefixSource("p", "", "bench", token_ids=tuple(prefix))],
        PrefillOptions(out=kv_dir),
    )
    model = loaded.model
    load_prefix(kv_dir, model, "p")  # the first load in a process verifies every byte
    resident = load_prefix(kv_dir, model, "p")

    @torch.no_grad()
    def full() -> None:
        model(torch.tensor([prefix + dynamic]), logits_to_keep=1)

    @torch.no_grad()
    def cached() -> None:
        cache = load_prefix(kv_dir, model, "p")
        model(torch.tensor([dynamic]), cache=cache, logits_to_keep=1)

    @torch.no_grad()
    def limit() -> None:
        model(torch.tensor([dynamic]), cache=resident, logits_to_keep=1)
        truncate(resident, len(prefix))

    t_cached, t_full = interleaved_seconds(cached, full, rounds=7)
    t_cached2, t_limit = interleaved_seconds(cached, limit, rounds=15)
    emit(
        "TTFT on SmolLM2-135M, 1,024-token code prefix + 32 tokens: loaded KV vs full prefill",
        t_cached * 1e3,
        t_full * 1e3,
        "ms",
        note="prefix: the first 1,024 tokens of the stdlib's argparse.py; medians of 7 "
        "interleaved rounds, float32, 2 CPU threads",
    )
    emit(
        "TTFT on SmolLM2-135M, 1,024 + 32 tokens: loaded KV vs the limit (the 32 tokens' "
        "forward over a cache already in memory)",
        t_cached2 * 1e3,
        t_limit * 1e3,
        "ms",
        goal="ratio >= 0.9",
        passed=t_limit / t_cached2 >= 0.9,
        note="medians of 15 interleaved rounds",
    )


def quant_rows(loaded, tmp: Path) -> None:
    cases = [
        ("INT8", {"bits": 8}, 1e-3, (False, True)),
        ("INT8 + 1,024 kept FP16 rows", {"bits": 8, "keep_fp16": 1024}, 1e-3, (True,)),
        (
            "INT4 + 1,024 kept FP16 rows",
            {"bits": 4, "group_size": 32, "keep_fp16": 1024},
            1e-2,
            (False, True),
        ),
        (
            "INT4 + 4,096 kept FP16 rows",
            {"bits": 4, "group_size": 32, "keep_fp16": 4096},
            1e-2,
            (True,),
        ),
    ]
    for label, settings, bound, heads in cases:
        for head in heads:
            result = quantize_embeddings(
                QuantizeOptions(
                    out=tmp / f"q-{settings['bits']}-{settings.get('keep_fp16')}-{head}",
                    prompts=PROMPTS,
                    include_lm_head=head,
                    **settings,
                ),
                loaded,
            )
            fidelity, memory = result.report.logit_fidelity, result.report.memory
            where = "input and output (tied: one table)" if head else "input only, output in FP"
            bytes_goal = "" if settings["bits"] == 4 else " at <= 0.52x FP16 bytes"
            passed = fidelity.mean_kl <= bound and (
                settings["bits"] == 4 or memory.ratio_vs_fp16 <= 0.52
            )
            emit(
                f"quantize SmolLM2-135M {label}, {where}: mean KL on 34 prompts vs the goal",
                fidelity.mean_kl,
                bound,
                "nats",
                goal=f"mean KL <= {bound:g}{bytes_goal}",
                passed=passed,
                note=f"{memory.ratio_vs_fp16:.3f}x FP16 bytes ({memory.bits_per_weight:.2f} bits "
                f"per weight); same top-1 {fidelity.same_top1:.4f}; max KL "
                f"{fidelity.max_kl:.3g}; {fidelity.positions} positions",
            )


def regress_rows(loaded, tmp: Path) -> None:
    prompts = PROMPTS
    kv = tmp / "kv-regress"
    sources = [PrefixSource("sys", "You write careful, idiomatic Python code.\n" * 6, "bench")]
    prefill_sources(loaded, sources, PrefillOptions(out=kv))
    quantize_embeddings(QuantizeOptions(out=tmp / "q8", prompts=None), loaded)
    quantize_embeddings(
        QuantizeOptions(
            out=tmp / "q4-all", bits=4, group_size=64, include_lm_head=True, prompts=None
        ),
        loaded,
    )
    expected = {"cached": True, "q8": True, "kv-int8": True, "q4-all": False, "prune-half": False}
    result = run_regress(
        RegressOptions(
            prompts=prompts,
            variants=(
                f"cached=kv={kv}",
                f"q8=quant={tmp / 'q8'}",
                "kv-int8=kv-dtype=int8",
                f"q4-all=quant={tmp / 'q4-all'}",
                "prune-half=prune=0.5",
            ),
            gen_tokens=8,
            max_tokens=128,
            thresholds=Thresholds(),
        ),
        loaded,
    )
    kl = {v.name: v.summary.kl_mean for v in result.variants}
    top1 = {v.name: v.summary.same_top1_lower for v in result.variants}
    for label, thresholds in (
        ("default thresholds", Thresholds()),
        ("--min-same-top1 0.98", Thresholds(min_same_top1=0.98)),
    ):
        reasons = {
            v.name: verdict(v.summary, v.prompt_kl, v.generation, thresholds)
            for v in result.variants
        }
        got = {name: not r for name, r in reasons.items()}
        emit(
            f"regress on SmolLM2-135M, {label}: verdicts as expected (good variants pass, "
            "broken ones fail)",
            sum(got[n] == expected[n] for n in expected),
            len(expected),
            "variants",
            higher_is_better=True,
            goal=f"{len(expected)} of {len(expected)}",
            passed=got == expected,
            note="; ".join(
                f"{n}: {'pass' if got[n] else 'fail'} (mean KL {kl[n]:.3g}, same top-1 95% lower "
                f"bound {top1[n]:.4f}" + (f"; {reasons[n][0]}" if reasons[n] else "") + ")"
                for n in expected
            )
            + "; the 34 sample prompts, 8 greedy tokens; good: KV from our folder, INT8 "
            "embeddings (output layer in float), an int8 KV cache; broken: INT4 of the tied "
            "table with no kept rows, half of each prompt pruned",
        )


def main() -> None:
    if not instruments.available():
        print(f"skipped: no real instruments in {instruments.root()} (make real-models)")
        return
    torch.set_num_threads(2)
    smollm2 = instruments.root() / instruments.SMOLLM2
    loaded = load_model(ModelSpec(str(smollm2)))
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        verify_rows(smollm2, tmp)
        ttft_rows(loaded, tmp)
        quant_rows(loaded, tmp)
        regress_rows(loaded, tmp)


if __name__ == "__main__":
    main()
