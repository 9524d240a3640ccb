"""Cold start in vLLM: the prepared prefix served by the copilot-opt connector vs recomputed.
Runs in the vLLM environment (`make vllm-env`; run_all.py picks it).

A ~100M-parameter Llama-style model (random init, the shipped tokenizer), a 1024-token static
prefix and a 32-token dynamic part, float32 on the CPU. TTFT is vLLM's own per-request
`first_token_latency` (arrival to first token), read with log stats on. Every configuration
runs in a fresh process (a fresh engine); each engine first answers one short unrelated request,
so the measured request is the first for this prefix, not the engine's first call.

Rows (side by side, medians over rounds, configurations interleaved):
  connector (prefix preloaded at engine start) vs no connector (full prefill): goal >= 5x
  connector vs vLLM's own warm prefix-cache hit (the same request again): goal within 1.5x
  connector loading the prefix from disk on first use vs full prefill
"""

# venv: .venv-vllm

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit

ROOT = Path(__file__).resolve().parents[1]
PREFIX_TOKENS = 1024
DYNAMIC_TOKENS = 32
ROUNDS = 2


def _prepare(folder: Path) -> dict:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from copilot_cli import ModelSpec, load_model
    from copilot_cli.kv import PrefillOptions, PrefixSource, prefill_sources

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "sample_data/models/tiny-code-llama")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    text = (ROOT / "sample_data/repo/src/kvstore/lru.py").read_text() * 8
    ids = tokenizer(text, add_special_tokens=False).input_ids
    prefix, dynamic = ids[:PREFIX_TOKENS], ids[PREFIX_TOKENS : PREFIX_TOKENS + DYNAMIC_TOKENS]
    loaded = load_model(ModelSpec(str(folder / "model")))
    source = PrefixSource("system", "", "bench", token_ids=tuple(prefix))
    prefill_sources(loaded, [source], PrefillOptions(out=folder / "kv"))
    return {
        "model": str(folder / "model"),
        "kv": str(folder / "kv"),
        "prefix": prefix,
        "dynamic": dynamic,
        "params": params,
    }


def _engine_run(setup: dict, mode: str) -> dict:
    """In a fresh process: TTFT of the first request for the prefix (and, with `apc`, of the
    same request again)."""
    setup_json = json.dumps(json.dumps(setup))
    code = (
        "import json, os, sys\n"
        "os.environ.setdefault('VLLM_CPU_KVCACHE_SPACE', '2')\n"
        "if __name__ == '__main__':\n"
        f"    sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
        "    from bench_serving import engine_main\n"
        f"    result = engine_main(json.loads({setup_json}), {mode!r})\n"
        "    print('RESULT ' + json.dumps(result))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"{mode} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def engine_main(setup: dict, mode: str) -> dict:
    from vllm import LLM, SamplingParams, TokensPrompt
    from vllm.config import KVTransferConfig

    kwargs = {}
    if mode.startswith("connector"):
        kwargs["kv_transfer_config"] = KVTransferConfig(
            kv_connector="CopilotPrefixConnector",
            kv_connector_module_path="copilot_cli.serving.vllm",
            kv_role="kv_consumer",
            kv_connector_extra_config={"kv_dir": setup["kv"], "preload": mode == "connector"},
        )
    llm = LLM(
        model=setup["model"],
        dtype="float32",
        enforce_eager=True,
        enable_prefix_caching=mode == "apc",
        disable_log_stats=False,
        **kwargs,
    )
    params = SamplingParams(max_tokens=1, temperature=0)
    if mode == "connector":
        import time

        time.sleep(2)  # the preload thread reads the folder while the engine idles
    llm.generate([TokensPrompt(prompt_token_ids=[5, 6, 7] * 5)], params, use_tqdm=False)
    target = TokensPrompt(prompt_token_ids=setup["prefix"] + setup["dynamic"])
    first = llm.generate([target], params, use_tqdm=False)[0]
    result = {"ttft": first.metrics.first_token_latency, "cached": first.num_cached_tokens}
    if mode == "apc":
        again = llm.generate([target], params, use_tqdm=False)[0]
        result.update(
            warm_ttft=again.metrics.first_token_latency, warm_cached=again.num_cached_tokens
        )
    return result


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        setup = _prepare(Path(tmp))
        runs: dict[str, list[dict]] = {"connector": [], "connector-lazy": [], "apc": []}
        for _ in range(ROUNDS):
            for mode in runs:
                runs[mode].append(_engine_run(setup, mode))
    ours = statistics.median(r["ttft"] for r in runs["connector"])
    lazy = statistics.median(r["ttft"] for r in runs["connector-lazy"])
    cold = statistics.median(r["ttft"] for r in runs["apc"])
    warm = statistics.median(r["warm_ttft"] for r in runs["apc"])
    cached = runs["connector"][0]["cached"]
    what = f"~{setup['params'] / 1e6:.0f}M llama, {PREFIX_TOKENS}-token prefix + {DYNAMIC_TOKENS}"
    emit(
        f"vLLM first-request TTFT, {what}: connector vs full prefill",
        ours * 1e3,
        cold * 1e3,
        "ms",
        goal="ratio >= 5",
        passed=cold / ours >= 5,
        note=f"{cached} tokens from the KV folder (preloaded at engine start); fresh engines, "
        f"median of {ROUNDS}",
    )
    emit(
        f"vLLM first-request TTFT, {what}: connector vs vLLM's warm prefix-cache hit",
        ours * 1e3,
        warm * 1e3,
        "ms",
        goal="ratio >= 1/1.5 (0.667)",
        passed=warm / ours >= 1 / 1.5,
        note=f"the warm hit served {runs['apc'][0]['warm_cached']} tokens from vLLM's own cache",
    )
    emit(
        f"vLLM first-request TTFT, {what}: connector reading the prefix on first use vs full "
        "prefill",
        lazy * 1e3,
        cold * 1e3,
        "ms",
        note="no preload: the segments are read and verified from disk (page cache) in the request",
    )


if __name__ == "__main__":
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    main()
