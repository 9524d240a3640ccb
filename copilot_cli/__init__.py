"""copilot-opt: offline preparation of what a self-hosted code assistant sends to its model.

The public API: one entry point per capability, each `entry(options, loaded=None) -> Result`
with a frozen options dataclass holding the defaults (see ARCHITECTURE.md):

    load_model(ModelSpec)                       -> LoadedModel (model, tokenizer, fingerprints)
    compile_templates(CompileOptions)           -> CompileResult   (a prompt bundle)
    load_bundle(path) / render_template(RenderOptions)
    prefill_kv(PrefillOptions)                  -> PrefillResult   (a KV folder)
    load_prefix(kv_dir, model, name) / PrefixStore(kv_dir, model)
    quantize_embeddings(QuantizeOptions)        -> QuantizeResult
    chunk_repository(ChunkOptions)              -> ChunkResult
    select_context(ContextOptions)              -> ContextResult   (chunks for one request)
    prune_text(PruneOptions)                    -> PruneResult
    run_regress(RegressOptions)                 -> RegressResult   (the CI gate)
    run_build(BuildOptions)                     -> BuildResult     (the whole pipeline)

Names are imported on first use, so `import copilot_cli` does not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_PUBLIC = {
    "ModelSpec": "copilot_cli.core.modelspec",
    "load_model": "copilot_cli.core.models",
    "load_tokenizer": "copilot_cli.core.models",
    "CompileOptions": "copilot_cli.prompts",
    "compile_templates": "copilot_cli.prompts",
    "load_bundle": "copilot_cli.prompts",
    "RenderOptions": "copilot_cli.prompts",
    "render_template": "copilot_cli.prompts",
    "PrefillOptions": "copilot_cli.kv",
    "prefill_kv": "copilot_cli.kv",
    "load_prefix": "copilot_cli.kv",
    "PrefixStore": "copilot_cli.kv",
    "QuantizeOptions": "copilot_cli.quant",
    "quantize_embeddings": "copilot_cli.quant",
    "ChunkOptions": "copilot_cli.chunking",
    "chunk_repository": "copilot_cli.chunking",
    "PruneOptions": "copilot_cli.prune",
    "prune_text": "copilot_cli.prune",
    "ContextOptions": "copilot_cli.context",
    "select_context": "copilot_cli.context",
    "RegressOptions": "copilot_cli.regress",
    "run_regress": "copilot_cli.regress",
    "BuildOptions": "copilot_cli.pipeline",
    "run_build": "copilot_cli.pipeline",
}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'copilot_cli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
