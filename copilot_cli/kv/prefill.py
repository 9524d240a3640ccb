"""Chunked prefill into a DynamicCache, truncation back to a parent segment's end, and the
unit of prefill work (segments in depth-first order, computed in one cache) that this process
and a Ray worker run alike."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from copilot_cli.core import lazy
from copilot_cli.core.models import cache_kwargs, truncate

transformers = lazy.module("transformers")

__all__ = ["WorkItem", "cache_length", "compute_segments", "extend", "truncate"]


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


def _append(cache: Any, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
    device = None
    for index, (k, v) in enumerate(zip(keys, values, strict=True)):
        if index < len(cache.layers) and getattr(cache.layers[index], "keys", None) is not None:
            device = cache.layers[index].keys.device
        cache.update(k.unsqueeze(0).to(device or "cpu"), v.unsqueeze(0).to(device or "cpu"), index)


@dataclass
class WorkItem:
    """One segment to produce: its position in the plan, where it starts, its tokens, and its
    keys/values when they are known already (a reused file, or a parent shipped in)."""

    key: int
    start: int
    token_ids: list[int]
    known: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None
    emit: bool = True


def compute_segments(
    model: Any,
    items: list[WorkItem],
    chunk_size: int,
    initial: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None,
) -> Iterator[tuple[int, list[torch.Tensor], list[torch.Tensor]]]:
    """(key, keys, values) of every item to emit that was not known, computed in one cache.

    `items` are in depth-first order (parents first); `initial` holds the keys/values of the
    positions before the first item (its parent chain). Going back up the tree, the cache is
    truncated to the next item's start, so each segment continues exactly its parent's cache:
    the same numbers whether the parent was computed here, read from a file or shipped in.
    """
    cache = transformers.DynamicCache()
    if initial is not None:
        _append(cache, *initial)
    for item in items:
        # no_grad around the work only, never across a yield: a consumer that stops early (a
        # full disk) would otherwise leave gradients off in its thread until this is collected
        with torch.no_grad():
            if cache_length(cache) > item.start:
                truncate(cache, item.start)
            if item.known is not None:
                _append(cache, *item.known)
                continue
            extend(model, cache, item.token_ids, chunk_size)
            if not item.emit:
                continue
            end = item.start + len(item.token_ids)
            keys = [layer.keys[0, :, item.start : end].to("cpu") for layer in cache.layers]
            values = [layer.values[0, :, item.start : end].to("cpu") for layer in cache.layers]
        yield item.key, keys, values
