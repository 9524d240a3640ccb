"""Build every deterministic artifact from the shipped inputs and hash each file.

Used by tests/test_artifacts_unchanged.py (and by scripts/record_artifact_hashes.py, which
writes the recorded set): the same inputs must keep giving byte-identical artifacts across
refactors. Regress reports and the build manifest hold timings, so they are not in the set.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def environment() -> dict[str, str]:
    """What the artifact bytes depend on besides the inputs: the library versions recorded in
    them, and the CPU kernels the KV values are computed with (AVX512 and AVX2 round
    differently)."""
    import tokenizers
    import torch
    import transformers

    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "tokenizers": tokenizers.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


PROJECTIONS = 8  # fixed random +-1 directions each KV tensor is summed along


def kv_values(kv: Path) -> dict[str, dict]:
    """Per KV segment of the folder `kv`: its metadata but the digest of its bytes, and per
    tensor its shape and PROJECTIONS fixed random projections of its values. On a CPU whose
    float kernels differ from the recorded one (the values move by ~1e-6) the segments are
    compared by these, within float noise, instead of byte for byte."""
    import torch
    from safetensors import safe_open

    out: dict[str, dict] = {}
    for path in sorted((kv / "segments").glob("*.safetensors")):
        with safe_open(path, "pt") as handle:
            metadata = {k: v for k, v in (handle.metadata() or {}).items() if k != "digest"}
            tensors = {}
            for name in sorted(handle.keys()):
                tensor = handle.get_tensor(name)
                values = tensor.double().flatten()
                signs = torch.randint(
                    0,
                    2,
                    (PROJECTIONS, values.numel()),
                    generator=torch.Generator().manual_seed(0),
                    dtype=torch.float64,
                )
                tensors[name] = {
                    "shape": list(tensor.shape),
                    "projections": ((signs * 2 - 1) @ values).tolist(),
                }
        out[f"kv/segments/{path.name}"] = {"metadata": metadata, "tensors": tensors}
    return out


def _hashes(root: Path, prefix: str) -> dict[str, str]:
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    out = {}
    for path in files:
        if path.name.startswith("."):
            continue
        rel = path.name if root.is_file() else path.relative_to(root).as_posix()
        out[f"{prefix}/{rel}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def build_all(out: Path) -> dict[str, str]:
    """Artifacts of the shipped templates, model and sample repository, by the library API."""
    from copilot_cli.chunking import ChunkOptions, chunk_repository
    from copilot_cli.core.models import SHIPPED_MODEL, ModelSpec, load_model
    from copilot_cli.kv import PrefillOptions, prefill_kv
    from copilot_cli.prompts import CompileOptions, compile_templates
    from copilot_cli.quant import QuantizeOptions, quantize_embeddings

    loaded = load_model(ModelSpec(str(SHIPPED_MODEL)))
    compile_templates(CompileOptions(REPO / "templates", out / "templates"), loaded.tokenizer)
    prefill_kv(PrefillOptions(out=out / "kv", bundle=out / "templates"), loaded)
    for bits in (8, 4):
        quantize_embeddings(
            QuantizeOptions(out=out / f"quant{bits}", bits=bits, keep_fp16=64, prompts=None),
            loaded,
        )
    chunk_repository(
        ChunkOptions(
            repos=(REPO / "sample_data" / "repo",),
            out=out / "chunks.jsonl",
            registry=out / "registry.json",
            use_cache=False,
            jobs=1,
        ),
        loaded.tokenizer,
    )
    hashes: dict[str, str] = {}
    for name in ("templates", "kv", "quant8", "quant4", "chunks.jsonl", "registry.json"):
        hashes.update(_hashes(out / name, name))
    return hashes
