from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, GPT2Config, MistralConfig, Qwen2Config

from copilot_cli.core.models import SHIPPED_MODEL, ModelSpec, load_model


def _save(config, folder: Path) -> Path:
    from transformers import AutoModelForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_MODEL)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def gpt2_dir(tmp_path_factory) -> Path:
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_MODEL)
    config = GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=512, vocab_size=len(tokenizer))
    return _save(config, tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="session")
def qwen2_dir(tmp_path_factory) -> Path:
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_MODEL)
    config = Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=512,
        vocab_size=len(tokenizer),
    )
    return _save(config, tmp_path_factory.mktemp("qwen2"))


@pytest.fixture(scope="session")
def mistral_sliding_dir(tmp_path_factory) -> Path:
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_MODEL)
    config = MistralConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        sliding_window=32,
        vocab_size=len(tokenizer),
    )
    return _save(config, tmp_path_factory.mktemp("mistral"))


@pytest.fixture(scope="session")
def arch_dirs(tiny_llama_dir, gpt2_dir, qwen2_dir) -> dict[str, Path]:
    return {"llama-gqa": tiny_llama_dir, "gpt2": gpt2_dir, "qwen2": qwen2_dir}


@pytest.fixture(scope="session")
def shipped():
    return load_model(ModelSpec(str(SHIPPED_MODEL)))
