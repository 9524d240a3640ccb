"""vLLM serving the real model (SmolLM2-135M, copilot_cli.instruments) through the connector:
the shipped templates compiled for its tokenizer and prefilled by copilot-opt (transformers),
served from the files, outputs token-identical to vLLM computing everything itself. Needs
`make real-models` (make test-vllm fetches it first); skipped when the cache is absent."""

from __future__ import annotations

import pytest

from tests_vllm.conftest import REPO, disturbed_copy, generate, make_engine, stop

GEN_TOKENS = 32


@pytest.fixture(scope="module")
def smollm2_prepared(tmp_path_factory):
    from copilot_cli import instruments

    if not instruments.available():
        pytest.skip(f"no real instruments in {instruments.root()} (make real-models)")
    from copilot_cli import (
        CompileOptions,
        ModelSpec,
        PrefillOptions,
        compile_templates,
        prefill_kv,
    )
    from copilot_cli.kv import KVCacheDir
    from copilot_cli.prompts import load_bundle

    model = instruments.root() / instruments.SMOLLM2
    root = tmp_path_factory.mktemp("smollm2")
    compile_templates(CompileOptions(REPO / "templates", root / "bundle", tokenizer=str(model)))
    prefill_kv(PrefillOptions(out=root / "kv", bundle=root / "bundle", model=ModelSpec(str(model))))
    bundle = load_bundle(root / "bundle")
    kv = KVCacheDir(root / "kv")
    cases = []
    for name in bundle.templates():
        import yaml

        source = REPO / "templates" / bundle.entry(name).source
        samples = yaml.safe_load(source.read_text().split("---")[1]).get("samples", [])
        for inputs in samples[:2]:
            cases.append((name, bundle.render(name, **inputs), len(kv.prefix(name).token_ids)))
    return {"model": model, "kv": root / "kv", "cases": cases, "log": root / "engine.log"}


def test_smollm2_prefixes_served_from_the_files_token_identically(smollm2_prepared):
    cases = smollm2_prepared["cases"]
    prompts = [text for _, text, _ in cases]
    on = make_engine(smollm2_prepared["kv"], model=smollm2_prepared["model"])
    try:
        with_kv = generate(on, prompts, GEN_TOKENS)
    finally:
        stop(on)
    off = make_engine(None, model=smollm2_prepared["model"])
    try:
        without = generate(off, prompts, GEN_TOKENS)
    finally:
        stop(off)
    assert len(cases) >= 6
    block = 128  # vLLM's CPU block size
    served = 0
    for (name, _, prefix_len), a, b in zip(cases, with_kv, without, strict=True):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids, name
        expected = min(prefix_len, len(a.prompt_token_ids) - 1) // block * block
        assert a.num_cached_tokens == expected, name
        assert b.num_cached_tokens == 0
        served += a.num_cached_tokens
    assert served > 0


def test_smollm2_served_stack_passes_regress_and_top_k_kl_is_within_5_percent(
    smollm2_prepared, tmp_path
):
    """regress --engine vllm on SmolLM2: vLLM itself and the connector pass; a checkpoint with
    two MLPs disturbed fails, and the default top-k KL (1,024 ids) is within 5% of the exact
    KL (the full 49,152-token vocabulary) on the same engine."""
    from copilot_cli import ModelSpec
    from copilot_cli.regress import RegressOptions, run_regress

    model = smollm2_prepared["model"]
    damaged = disturbed_copy(model, tmp_path / "damaged", (10, 20), 0.15)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join((REPO / "sample_data" / "prompts.jsonl").open().readlines()[:6]))
    options = RegressOptions(
        prompts=prompts,
        variants=(
            "served=vllm=default",
            f"connector=kv={smollm2_prepared['kv']}",
            f"exact=vllm=model:{damaged},logprobs:full",
            f"topk=vllm=model:{damaged},logprobs:1024",
        ),
        engine="vllm",
        gen_tokens=4,
        max_tokens=48,
        model=ModelSpec(str(model)),
    )
    found = {v.name: v for v in run_regress(options).variants}
    assert found["served"].failures == [], found["served"].failures
    assert found["connector"].failures == [], found["connector"].failures
    assert found["exact"].failures and found["topk"].failures
    exact, topk = found["exact"].summary.kl_mean, found["topk"].summary.kl_mean
    assert 0.95 * exact <= topk <= exact * (1 + 1e-9), (topk, exact)
