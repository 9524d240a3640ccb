"""Batched forwards for regress: several cases in one padded forward, their caches kept.

A batch of token sequences runs as one forward, each row padded on the right to the longest
(the attention mask hides the padding; a causal model's real positions never see it, so each
row's logits are its own sequence's). Only the positions some row scores are turned into
logits (`logits_to_keep`), which bounds the memory of a large vocabulary. When greedy tokens
are wanted, the forward's cache is kept: each row's part of it, cut to its own length less
one token, continues decoding, so a continuation costs its own tokens and no second prefill.

Batches are formed by `plan_batches`: cases sorted by length (little padding), at most
`batch_size` per batch and a bounded number of logits per batch. The batches depend only on
the cases and the options, so a Ray actor given a batch computes what one process computes.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from copilot_cli.core import lazy
from copilot_cli.core.models import cache_kwargs

transformers = lazy.module("transformers")

# logits held at once by one batch (elements): 2^27 is 256 MiB in bfloat16, 512 MiB in float32
LOGIT_BUDGET = 1 << 27


@dataclass
class Rows:
    """One batched forward: per row its logits from `starts[b]` to its last-but-one position
    (float32, CPU) and, when asked for, the cache to continue decoding from."""

    logits: list[torch.Tensor]
    cache: Any
    lengths: list[int]


def plan_batches(lengths: dict[int, int], batch_size: int, vocab: int) -> list[list[int]]:
    """Case indices in batches: shortest first, at most `batch_size` each, and at most
    LOGIT_BUDGET logits (padded length x vocab x rows) in any batch of two or more."""
    order = sorted(lengths, key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        rows = len(current) + 1
        if current and (rows > batch_size or rows * lengths[index] * vocab > LOGIT_BUDGET):
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


@torch.no_grad()
def forward_rows(
    model: Any, seqs: Sequence[Sequence[int]], starts: Sequence[int], *, keep_cache: bool
) -> Rows:
    """Logits of rows `seqs` at positions [starts[b], len(seqs[b]) - 1), one padded forward."""
    device = next(model.parameters()).device
    width = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for row, seq in enumerate(seqs):
        ids[row, : len(seq)] = torch.tensor(list(seq), dtype=torch.long)
        mask[row, : len(seq)] = 1
    keep = width - min(starts)
    cache = transformers.DynamicCache(config=model.config) if keep_cache else None
    kwargs: dict[str, Any] = {"attention_mask": mask} if len(seqs) > 1 else {}
    if cache is not None:
        kwargs.update(cache_kwargs(model, cache))
    if _keeps_logits(model):
        kwargs["logits_to_keep"] = keep
    else:
        keep = width
    out = model(ids, **kwargs).logits
    first = width - keep  # the padded position of out[:, 0]
    rows = [
        out[row, start - first : len(seq) - 1 - first].float().cpu()
        for row, (seq, start) in enumerate(zip(seqs, starts, strict=True))
    ]
    return Rows(rows, cache, [len(s) for s in seqs])


def row_cache(model: Any, rows: Rows, row: int) -> Any:
    """Row `row`'s cache, all its tokens but the last: `greedy` computes that one and goes on."""
    length = rows.lengths[row] - 1
    cache = transformers.DynamicCache(config=model.config)
    for index, layer in enumerate(rows.cache.layers):
        cache.update(
            layer.keys[row : row + 1, :, :length].clone(),
            layer.values[row : row + 1, :, :length].clone(),
            index,
        )
    return cache


def _keeps_logits(model: Any) -> bool:

    return "logits_to_keep" in inspect.signature(model.forward).parameters
