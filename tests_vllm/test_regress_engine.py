"""regress --engine vllm: the served stack scored against the original model in transformers.
vLLM itself and vLLM with the connector pass the gate; KV computed for the tokens in another
order (resealed, so every digest checks out) and a damaged checkpoint fail it; the top-k
estimate of KL stays within 5% of the exact one on the same engine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests_vllm.conftest import MODEL, REPO, disturbed_copy

PROMPTS = REPO / "sample_data" / "prompts.jsonl"


def _prompts(tmp_path: Path, count: int) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(PROMPTS.read_text().splitlines(keepends=True)[:count]))
    return path


def _reseal(path: Path, edit) -> None:
    """Rewrite a safetensors artifact with `edit` applied to its tensors and its digest
    recomputed, as anyone can."""
    from copilot_cli.core.artifacts import atomic_write
    from copilot_cli.core.safetensors_io import (
        DIGEST_KEY,
        read_tensors,
        sealed_metadata,
        write_safetensors,
    )

    tensors, metadata = read_tensors(path)
    tensors = {name: edit(name, tensor.clone()) for name, tensor in tensors.items()}
    metadata = {k: v for k, v in metadata.items() if k != DIGEST_KEY}
    with atomic_write(path) as handle:
        write_safetensors(handle, tensors, sealed_metadata(tensors, metadata))


@pytest.fixture(scope="module")
def reordered_kv(prepared, tmp_path_factory) -> Path:
    """The shipped prefixes' KV with each segment's tokens in reverse order (what a folder
    prefilled from another prefix order holds at those positions), resealed."""
    folder = Path(shutil.copytree(prepared["kv"], tmp_path_factory.mktemp("kv") / "reordered"))
    for path in sorted((folder / "segments").glob("*.safetensors")):
        _reseal(path, lambda name, t: t if name == "token_ids" else t.flip(-2).contiguous())
    return folder


@pytest.fixture(scope="module")
def damaged_model(tmp_path_factory) -> Path:
    """The shipped model with two MLPs' weights disturbed (a checkpoint damaged in conversion)."""
    return disturbed_copy(MODEL, tmp_path_factory.mktemp("models") / "damaged", (1, 2), 2.0)


def _regress(tmp_path: Path, variants: tuple[str, ...], count: int = 8):
    from copilot_cli import ModelSpec
    from copilot_cli.regress import RegressOptions, ReportPaths, run_regress

    options = RegressOptions(
        prompts=_prompts(tmp_path, count),
        variants=variants,
        engine="vllm",
        gen_tokens=4,
        max_tokens=48,
        model=ModelSpec(str(MODEL)),
        reports=ReportPaths.in_folder(tmp_path / "reports"),
    )
    return {v.name: v for v in run_regress(options).variants}


def test_the_served_stack_passes_and_reordered_kv_fails_from_the_command_line(
    prepared, reordered_kv, tmp_path
):
    args = ["regress", "--engine", "vllm", "-m", str(MODEL), "--json", "-"]
    args += ["--prompts", str(_prompts(tmp_path, 8)), "--gen-tokens", "4", "--max-tokens", "48"]
    args += ["-v", "served=vllm=default", "-v", f"connector=kv={prepared['kv']}"]
    args += ["-v", f"reordered=kv={reordered_kv}", "--junit", str(tmp_path / "r.xml")]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "copilot_cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    report = json.loads(done.stdout)  # engine logs went to stderr
    variants = {v["name"]: v for v in report["variants"]}
    assert variants["served"]["failures"] == [], variants["served"]
    assert variants["served"]["summary"]["same_top1"] == 1.0
    assert variants["connector"]["failures"] == [], variants["connector"]
    assert variants["connector"]["case_set"].startswith("kv:")
    assert variants["reordered"]["failures"], variants["reordered"]
    assert (
        variants["reordered"]["summary"]["kl_mean"]
        > 100 * variants["connector"]["summary"]["kl_mean"] + 1e-3
    )
    junit = (tmp_path / "r.xml").read_text()
    assert 'name="regress.reordered"' in junit and "<failure" in junit


def test_a_damaged_checkpoint_fails_and_top_k_kl_bounds_the_exact(damaged_model, tmp_path):
    """On this toy model (8,192 tokens, flat distributions: perplexity near 50) the top-k
    estimate needs k = 2,048 to come within 5% (its default here is the full vocabulary);
    SmolLM2's test holds the default k to 5%."""
    copy = Path(shutil.copytree(MODEL, tmp_path / "copy"))
    variants = (
        f"copy=vllm=model:{copy}",
        f"exact=vllm=model:{damaged_model}",
        f"top2048=vllm=model:{damaged_model},logprobs:2048",
        f"top16=vllm=model:{damaged_model},logprobs:16",
    )
    found = _regress(tmp_path, variants)
    assert found["copy"].failures == []
    exact, top2048, top16 = (found[n].summary for n in ("exact", "top2048", "top16"))
    assert found["exact"].failures and found["top16"].failures
    assert 1e-3 < exact.kl_mean < 5.0  # a real, measurable difference
    for estimate in (top2048, top16):
        assert estimate.kl_mean <= exact.kl_mean * (1 + 1e-9)  # a lower bound
        assert estimate.positions == exact.positions
        assert estimate.same_top1 == exact.same_top1  # exact in both
    assert top2048.kl_mean >= 0.95 * exact.kl_mean, (top2048.kl_mean, exact.kl_mean)
