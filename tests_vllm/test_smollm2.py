"""vLLM serving the real model (SmolLM2-135M, copilot_cli.instruments) through the connector:
the shipped templates compiled for its tokenizer and prefilled by copilot-opt (transformers),
served from the files, outputs token-identical to vLLM computing everything itself. Needs
`make real-models` (make test-vllm fetches it first); skipped when the cache is absent."""

from __future__ import annotations

import pytest

from tests_vllm.conftest import REPO, generate, make_engine, stop

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

        source = REPO / "templates" / bundle.entry(name)["source"]
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
