"""Chunked prefill into a DynamicCache, and truncation back to a parent segment's end."""

from __future__ import annotations

from typing import Any

import torch

from copilot_cli.core.models import cache_kwargs, truncate

__all__ = ["cache_length", "extend", "truncate"]


def cache_length(cache: Any) -> int:
    layers = [layer for layer in cache.layers if getattr(layer, "is_initialized", True)]
    return int(layers[0].keys.shape[2]) if layers and layers[0].keys is not None else 0


@torch.no_grad()
def extend(model: Any, cache: Any, token_ids: list[int], chunk_size: int) -> None:
    """Feed `token_ids` through `model` in chunks, appending their keys/values to `cache`.

    Chunking bounds activation memory (a 32k-token prefix needs one chunk's activations at a
    time); only the last position's logits are computed.
    """
    device = next(model.parameters()).device
    for offset in range(0, len(token_ids), chunk_size):
        chunk = torch.tensor([token_ids[offset : offset + chunk_size]], device=device)
        model(input_ids=chunk, use_cache=True, logits_to_keep=1, **cache_kwargs(model, cache))
