"""Shared fixtures of the vLLM tests: the shipped templates prefilled with the shipped model, and
engines (expensive: one per configuration and module) whose logs land in a file."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "sample_data" / "models" / "tiny-code-llama"
# a prefix of its own (nothing in the templates starts like it), corrupted for one test
CORRUPT_TEXT = "### Legacy rules for generated migrations\n" * 24
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COPILOT_OPT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
        yield


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The shipped templates compiled and prefilled (float32), plus a prefix whose only segment
    has one byte flipped in its tensor data."""
    from copilot_cli import CompileOptions, PrefillOptions, compile_templates, prefill_kv

    root = tmp_path_factory.mktemp("prepared")
    compile_templates(CompileOptions(REPO / "templates", root / "bundle"))
    corrupt = root / "corrupt.txt"
    corrupt.write_text(CORRUPT_TEXT)
    prefill_kv(PrefillOptions(out=root / "kv", bundle=root / "bundle", texts=(corrupt,)))
    broken = shutil.copytree(root / "kv", root / "kv-broken")
    import json

    index = json.loads((broken / "index.json").read_text())
    (segment,) = index["prefixes"]["corrupt.txt"]["segments"]
    path = broken / "segments" / f"{segment}.safetensors"
    data = bytearray(path.read_bytes())
    data[-1000] ^= 0x01  # a key or value of the last layer
    path.write_bytes(bytes(data))
    return {"root": root, "bundle": root / "bundle", "kv": root / "kv", "kv_broken": broken}


@contextlib.contextmanager
def output_to(path: Path) -> Iterator[None]:
    """Point fds 1 and 2 at `path` while an engine starts: its processes (vLLM logs to stdout)
    keep writing there."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with path.open("ab") as handle:
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


def make_engine(
    kv_dir: Path | None,
    *,
    prefix_caching: bool = False,
    log: Path | None = None,
    extra: dict | None = None,
    model: Path = MODEL,
):
    from vllm import LLM
    from vllm.config import KVTransferConfig

    kwargs = {}
    if kv_dir is not None:
        kwargs["kv_transfer_config"] = KVTransferConfig(
            kv_connector="CopilotPrefixConnector",
            kv_connector_module_path="copilot_cli.serving.vllm",
            kv_role="kv_consumer",
            kv_connector_extra_config={"kv_dir": str(kv_dir), **(extra or {})},
        )
    with output_to(log) if log is not None else contextlib.nullcontext():
        return LLM(
            model=str(model),
            dtype="float32",
            enforce_eager=True,
            enable_prefix_caching=prefix_caching,
            **kwargs,
        )


def stop(engine) -> None:
    with contextlib.suppress(Exception):
        engine.llm_engine.engine_core.shutdown()
    del engine
    import gc

    gc.collect()


@pytest.fixture(scope="session")
def engines(prepared, tmp_path_factory):
    """vLLM with the connector (the broken folder: the templates are intact, one prefix is
    not) and without it; prefix caching off in both, so every cached token is the connector's."""
    log = tmp_path_factory.mktemp("logs") / "with-connector.log"
    on = make_engine(prepared["kv_broken"], log=log)
    off = make_engine(None)
    yield {"on": on, "off": off, "log": log}
    stop(on)
    stop(off)


def generate(engine, prompts, max_tokens: int):
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    return engine.generate(prompts, params, use_tqdm=False)


def disturbed_copy(model: Path, dest: Path, layers: tuple[int, ...], scale: float) -> Path:
    """A copy of `model` whose MLP down-projections of `layers` carry seeded Gaussian noise of
    `scale` times each weight's standard deviation (a checkpoint damaged in conversion)."""
    import torch
    from safetensors.torch import load_file, save_file

    folder = Path(shutil.copytree(model, dest))
    tensors = load_file(folder / "model.safetensors")
    generator = torch.Generator().manual_seed(0)
    for layer in layers:
        name = f"model.layers.{layer}.mlp.down_proj.weight"
        noise = torch.randn(tensors[name].shape, generator=generator).to(tensors[name].dtype)
        tensors[name] = tensors[name] + noise * tensors[name].float().std() * scale
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return folder
