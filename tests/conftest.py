"""Shared fixtures: tiny random-init models saved to disk, the shipped model, a CLI runner."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import settings
from typer.testing import CliRunner

from copilot_cli.core.models import SHIPPED_MODEL

REPO_ROOT = Path(__file__).resolve().parents[1]

# Property tests explore the same examples on every run: CI results do not depend on luck.
settings.register_profile("deterministic", derandomize=True, deadline=None)
settings.load_profile("deterministic")


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory):
    """Each test session gets its own caches, never the user's (set before any other fixture,
    module- and session-scoped ones included)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COPILOT_OPT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
        yield


@pytest.fixture(scope="session")
def shipped_model_dir() -> Path:
    return SHIPPED_MODEL


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-init Llama with grouped-query attention, saved with the shipped tokenizer."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_MODEL)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture()
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture(scope="session")
def shipped_artifacts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """Every deterministic artifact of the shipped inputs, built once (tests that change one
    copy it first), with the hash of each file; plus a small top-k regress baseline."""
    from copilot_cli.regress import RegressOptions, run_regress
    from tests.golden.artifacts import build_all

    out = tmp_path_factory.mktemp("shipped-artifacts")
    hashes = build_all(out)
    prompts = out / "prompts.jsonl"
    prompts.write_text(
        "".join((REPO_ROOT / "sample_data" / "prompts.jsonl").read_text().splitlines(True)[:3])
    )
    run_regress(
        RegressOptions(
            prompts=prompts,
            save_baseline=out / "baseline.safetensors",
            baseline_topk=8,
            gen_tokens=4,
            max_tokens=64,
        )
    )
    return out, hashes


@pytest.fixture(scope="session")
def sessions_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated request log of scripts/generate_sessions.py (fixed seed), made once."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "generate_sessions", REPO_ROOT / "scripts" / "generate_sessions.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("sessions") / "sessions.jsonl"
    module.write_sessions(out)
    return out
