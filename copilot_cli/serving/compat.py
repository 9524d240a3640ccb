"""Whether a KV folder may be served by an engine: same model, same tokenizer, same dtype, same
attention geometry. Engine-independent (no vLLM import), so it is tested on its own and run by
`copilot-opt serve` before an engine is started."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from copilot_cli.core import lazy
from copilot_cli.core.errors import ArtifactError, FingerprintMismatch
from copilot_cli.core.fingerprints import model_fingerprint_from_folder, tokenizer_fingerprint
from copilot_cli.kv import KVCacheDir

huggingface_hub = lazy.module("huggingface_hub")


@dataclass(frozen=True)
class EngineModel:
    """What an engine serves, as the checks need it."""

    model_dir: Path
    tokenizer: Any  # a loaded transformers tokenizer
    dtype: str  # "float32" | "float16" | "bfloat16"
    num_layers: int
    kv_heads: int
    head_dim: int


def local_folder(name: str) -> Path:
    """A model folder for a path or a cached hub id (serving never downloads)."""
    path = Path(name)
    if path.is_dir():
        return path
    return Path(huggingface_hub.snapshot_download(name, local_files_only=True))


def check_servable(kv: KVCacheDir, engine: EngineModel) -> None:
    """Refuse a KV folder made for another model, tokenizer, dtype or geometry.

    Raises:
        FingerprintMismatch: another model or tokenizer (both fingerprints named).
        ArtifactError: another dtype or attention geometry.
    """

    where = str(kv.path)
    found = model_fingerprint_from_folder(engine.model_dir)
    if kv.model_fingerprint != found:
        raise FingerprintMismatch("model", expected=found, found=kv.model_fingerprint, where=where)
    tok = tokenizer_fingerprint(engine.tokenizer)
    index = kv.index
    if index.tokenizer_fingerprint != tok:
        raise FingerprintMismatch(
            "tokenizer", expected=tok, found=index.tokenizer_fingerprint, where=where
        )
    if index.dtype != engine.dtype:
        raise ArtifactError(
            f"KV was computed in {index.dtype}, the engine runs {engine.dtype}: start it "
            f"with --dtype {index.dtype}, or prefill again with --dtype {engine.dtype} "
            "(KV of another precision is never converted: it would not equal a recompute)",
            where=where,
        )
    geometry = index.geometry
    if (
        geometry.num_layers != engine.num_layers
        or set(geometry.kv_heads) != {engine.kv_heads}
        or set(geometry.head_dims) != {engine.head_dim}
    ):
        raise ArtifactError(
            f"KV geometry (layers {geometry.num_layers}, kv heads {geometry.kv_heads[0]}, "
            f"head_dim {geometry.head_dims[0]}) differs from the engine's ({engine.num_layers}"
            f", {engine.kv_heads}, {engine.head_dim})",
            where=where,
        )
