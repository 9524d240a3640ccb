"""Measure cached-vs-recomputed logit differences per dtype (kv/verify.py tolerances)."""

import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, Qwen2Config

from copilot_cli.core.fingerprints import model_fingerprint, tokenizer_fingerprint
from copilot_cli.core.models import (
    SHIPPED_MODEL,
    LoadedModel,
    ModelSpec,
    load_model,
    load_tokenizer,
)
from copilot_cli.kv import PrefillOptions, PrefixSource, prefill_sources, verify_prefixes
from copilot_cli.kv.builder import prefixes_from_bundle
from copilot_cli.prompts import CompileOptions, compile_templates

tok = load_tokenizer(str(SHIPPED_MODEL))
tmp = Path(tempfile.mkdtemp())
compile_templates(CompileOptions(Path(__file__).resolve().parents[1] / "templates", tmp / "b"), tok)
text = [
    PrefixSource(f"t{i}", ("You are a careful assistant.\n" * 30) + f"Task {i}\n", "t")
    for i in range(3)
]
V = len(tok)
cfgs = {
    "llama": LlamaConfig(
        vocab_size=V,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
    ),
    "gpt2": GPT2Config(vocab_size=V, n_embd=128, n_layer=3, n_head=4, n_positions=1024),
    "qwen2": Qwen2Config(
        vocab_size=V,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=1024,
    ),
}
for dtype in ("float16", "bfloat16", "float32"):
    worst = {}
    loaded = load_model(ModelSpec(str(SHIPPED_MODEL), dtype=dtype))
    srcs = prefixes_from_bundle(tmp / "b", loaded.tokenizer_fingerprint)
    prefill_sources(loaded, srcs, PrefillOptions(out=tmp / f"kv-{dtype}"))
    worst["shipped"] = max(r.max_abs_diff for r in verify_prefixes(loaded, tmp / f"kv-{dtype}"))
    for name, cfg in cfgs.items():
        torch.manual_seed(0)
        m = AutoModelForCausalLM.from_config(cfg).to(getattr(torch, dtype)).eval()
        lm = LoadedModel(m, tok, model_fingerprint(m), tokenizer_fingerprint(tok), name)
        prefill_sources(lm, text, PrefillOptions(out=tmp / f"kv-{name}-{dtype}", chunk_size=64))
        worst[name] = max(r.max_abs_diff for r in verify_prefixes(lm, tmp / f"kv-{name}-{dtype}"))
    print(dtype, {k: f"{v:.2e}" for k, v in worst.items()})
