"""vLLM with the copilot-opt connector: every shipped template prefix served from the KV folder,
outputs token-identical to vLLM without it; partial prefixes, corrupt segments, foreign
folders, and vLLM's own prefix cache behind the connector."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests_vllm.conftest import CORRUPT_TEXT, MODEL, REPO, generate, make_engine, stop

GEN_TOKENS = 64


def _inputs(source: Path) -> list[dict]:
    """Three inputs per template: its samples, and variants of the first one."""
    meta = yaml.safe_load(source.read_text().split("---")[1])
    samples = list(meta.get("samples", []))
    base = samples[0]
    variants = []
    for k in range(3):
        changed = dict(base)
        for key, value in base.items():
            if isinstance(value, str) and key not in ("language",):
                changed[key] = value + f"\n# variant {k}: check the edge case {k * 7}\n"
                break
        variants.append(changed)
    return (samples + variants)[: max(3, len(samples))]


@pytest.fixture(scope="module")
def cases(prepared):
    from copilot_cli.kv import KVCacheDir
    from copilot_cli.prompts import load_bundle

    bundle = load_bundle(prepared["bundle"])
    kv = KVCacheDir(prepared["kv"])
    out = []
    for name in bundle.templates():
        source = REPO / "templates" / bundle.entry(name).source
        for inputs in _inputs(source):
            out.append((name, bundle.render(name, **inputs), len(kv.prefix(name).token_ids)))
    return out


def _generate(engine, prompts):
    return generate(engine, prompts, GEN_TOKENS)


def test_every_template_prefix_is_served_and_outputs_are_identical(engines, cases):
    prompts = [text for _, text, _ in cases]
    with_kv = _generate(engines["on"], prompts)
    without = _generate(engines["off"], prompts)
    assert len(cases) >= 3 * 6
    block = 128  # vLLM's CPU block size
    for (name, _, prefix_len), a, b in zip(cases, with_kv, without, strict=True):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids, name
        assert len(a.outputs[0].token_ids) == GEN_TOKENS
        expected = min(prefix_len, len(a.prompt_token_ids) - 1) // block * block
        assert a.num_cached_tokens == expected > 0, name
        assert b.num_cached_tokens == 0


def test_a_prompt_sharing_part_of_a_prefix_gets_only_the_shared_whole_blocks(engines, prepared):
    from vllm import TokensPrompt

    from copilot_cli.kv import KVCacheDir

    stored = KVCacheDir(prepared["kv"]).prefix("docstring").token_ids
    assert len(stored) > 300
    ids = list(stored[:300]) + [17, 42, 99, 7] * 20  # diverges after 300 tokens
    (a,) = _generate(engines["on"], [TokensPrompt(prompt_token_ids=ids)])
    (b,) = _generate(engines["off"], [TokensPrompt(prompt_token_ids=ids)])
    assert a.num_cached_tokens == 256  # two whole 128-token blocks of the shared 300
    assert a.outputs[0].token_ids == b.outputs[0].token_ids


def test_a_bit_flipped_segment_is_computed_normally_and_logged(engines):
    (a,) = _generate(engines["on"], [CORRUPT_TEXT + "Now write the migration:\n"])
    (b,) = _generate(engines["off"], [CORRUPT_TEXT + "Now write the migration:\n"])
    assert a.num_cached_tokens == 0
    assert a.outputs[0].token_ids == b.outputs[0].token_ids
    log = engines["log"].read_text(errors="replace")
    assert "segment" in log and "unusable" in log and "digest" in log


def test_a_kv_folder_of_another_model_stops_the_engine(prepared, tmp_path):
    """A folder prefilled with another model (same tokenizer): the engine refuses to start."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    other = tmp_path / "other-model"
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(other)
    tokenizer.save_pretrained(other)
    from copilot_cli import ModelSpec, PrefillOptions, load_model, prefill_kv

    text = tmp_path / "p.txt"
    text.write_text("You review code.\n" * 40)
    prefill_kv(
        PrefillOptions(out=tmp_path / "kv", texts=(text,)), load_model(ModelSpec(str(other)))
    )
    script = (
        "import os\n"
        "os.environ.setdefault('VLLM_CPU_KVCACHE_SPACE', '1')\n"
        "if __name__ == '__main__':\n"
        "    from tests_vllm.conftest import make_engine\n"
        f"    make_engine({str(tmp_path / 'kv')!r})\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=600
    )
    assert proc.returncode != 0
    assert "copilot-opt connector refuses" in proc.stderr
    assert "made for model" in proc.stderr


def test_first_request_from_the_files_later_ones_from_vllms_prefix_cache(prepared, cases, tmp_path):
    log = tmp_path / "apc.log"
    engine = make_engine(prepared["kv"], prefix_caching=True, log=log)
    try:
        name, text, prefix_len = cases[0]
        first = _generate(engine, [text])[0]
        loads_after_first = log.read_text(errors="replace").count("copilot-opt connector: loaded")
        second = _generate(engine, [text])[0]
        loads_after_second = log.read_text(errors="replace").count("copilot-opt connector: loaded")
    finally:
        stop(engine)
    assert first.num_cached_tokens > 0 and second.num_cached_tokens >= first.num_cached_tokens
    assert loads_after_first == 1 and loads_after_second == 1  # the second came from vLLM
    assert first.outputs[0].token_ids == second.outputs[0].token_ids, (name, prefix_len)


def test_a_warm_plan_decides_what_is_read_and_requests_are_logged(prepared, cases, tmp_path):
    import json

    from copilot_cli.warm import BloomFilter, read_log
    from copilot_cli.warm.plan import Plan, PlanItem, write_plan

    names = sorted({name for name, _, _ in cases})
    index = json.loads((prepared["kv"] / "index.json").read_text())
    plan = Plan(
        items=[
            PlanItem(names[0], "prefix", "L0", 1, 0.9),
            PlanItem(names[1], "prefix", "L2", 1, 0.1),
        ],
        budget=1 << 30,
        window=600,
        predictor="test",
        bloom=BloomFilter.for_items([f"prefix:{names[1]}"], 0.001),
        kv={k: index[k] for k in ("model_fingerprint", "tokenizer_fingerprint")},
    )
    write_plan(plan, tmp_path / "plan.json")
    extra = {"plan": str(tmp_path / "plan.json"), "request_log": str(tmp_path / "requests.jsonl")}
    engine = make_engine(prepared["kv"], log=tmp_path / "plan.log", extra=extra)
    try:
        texts = {name: next(t for n, t, _ in cases if n == name) for name in names[:3]}
        outputs = {name: _generate(engine, [text])[0] for name, text in texts.items()}
    finally:
        stop(engine)
    assert outputs[names[0]].num_cached_tokens > 0  # L0: resident from the start
    assert outputs[names[1]].num_cached_tokens > 0  # L2: the filter allows it, read on use
    # in no tier: its own segments are never read; only the trunk it shares with planned
    # prefixes (the role and rules parts) is served
    own = len(index["prefixes"][names[2]]["token_ids"]) // 16 * 16
    assert outputs[names[2]].num_cached_tokens < own
    logged = read_log([tmp_path / "requests.jsonl"])
    assert names[0] in {r.prefix for r in logged} and names[1] in {r.prefix for r in logged}
