"""The attention geometry of a model, read from a real forward pass (not guessed from config)."""

from __future__ import annotations

from typing import Any

import torch

from copilot_cli.core import lazy
from copilot_cli.core.errors import InputError
from copilot_cli.core.models import cache_kwargs, context_length
from copilot_cli.kv.format import ModelGeometry

transformers = lazy.module("transformers")


def rope_settings(config: Any) -> dict[str, Any]:
    """Position-encoding settings that change the cached keys (RoPE parameters, or learned)."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    theta = getattr(config, "rope_theta", None)
    if params or theta:
        out = dict(params or {})
        if theta is not None:
            out.setdefault("rope_theta", theta)
        return {k: out[k] for k in sorted(out)}
    if getattr(config, "model_type", "") in ("gpt2", "gpt_neo", "opt", "gptj") or hasattr(
        config, "n_positions"
    ):
        return {"type": "learned-absolute"}
    return {"type": "unknown"}


def sliding_window(config: Any) -> int | None:
    """The attention window when any layer uses sliding-window attention, else None."""
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return int(window) if "sliding_attention" in layer_types else None
    if getattr(config, "use_sliding_window", True) is False:
        return None
    return int(window)


def model_geometry(model: Any) -> ModelGeometry:
    """Layers, kv heads and head_dim per layer from a one-token forward; cached on the model."""
    cached = getattr(model, "_copilot_kv_geometry", None)
    if cached is not None:
        return cached
    cache = transformers.DynamicCache()
    device = next(model.parameters()).device
    with torch.no_grad():
        model(
            input_ids=torch.zeros((1, 1), dtype=torch.long, device=device),
            use_cache=True,
            **cache_kwargs(model, cache),
        )
    if not cache.layers:
        raise InputError(
            "the model returned no KV cache (not a decoder with attention?)", where="--model"
        )
    geometry = ModelGeometry(
        num_layers=len(cache.layers),
        kv_heads=[int(layer.keys.shape[1]) for layer in cache.layers],
        head_dims=[int(layer.keys.shape[3]) for layer in cache.layers],
        rope=rope_settings(model.config),
        context_length=context_length(model.config),
        sliding_window=sliding_window(model.config),
    )
    model._copilot_kv_geometry = geometry
    return geometry
