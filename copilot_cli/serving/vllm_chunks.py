"""Chunk KV through vLLM's connector: a request whose prompt is [stored prefix][snippet]...
gets each stored snippet's KV placed at its position, keys re-rotated, before vLLM computes the
rest (no vLLM import here; serving/vllm.py calls it).

vLLM takes externally cached tokens only as one run from position 0, and a connector cannot
run the model, so there is no selective recompute: the endpoint names the snippets it placed
in the prompt (`kv_transfer_params`: `copilot_chunks` = [[name, start], ...]) and how many
tokens at the region's end vLLM computes itself (`copilot_compute_last`). Every placement is
checked here: the chunk is stored, its tokens are the prompt's at that position (never
another snippet's KV), and the placements follow the prefix and each other with no gap.

Placed KV is approximate (each snippet's was computed after a canonical lead): it must never
answer another request's exact prefix lookup, so a request is placed only with a
`cache_salt` (vLLM keys its prefix-cache blocks by it); the endpoint salts such requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from copilot_cli.kv import rerotate

CHUNKS_KEY = "copilot_chunks"
COMPUTE_LAST_KEY = "copilot_compute_last"
SALT = "copilot-opt-chunk-kv"  # what the endpoint salts placed requests with


@dataclass(frozen=True)
class Placement:
    """A stored snippet's own tokens, [lead, lead + length) in its chunk entry, placed at
    [start, start + length) of the request."""

    name: str
    lead: int
    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length


def plan(index: Any, request: Any, ids: list[int], start: int) -> tuple[list[Placement], int]:
    """(the placements the request asks for that hold, the tokens vLLM computes at the end)
    after a stored prefix ending at `start`; nothing without a cache salt."""
    params = getattr(request, "kv_transfer_params", None) or {}
    wanted = params.get(CHUNKS_KEY)
    if not isinstance(wanted, list) or not getattr(request, "cache_salt", None):
        return [], 0
    found: list[Placement] = []
    position = start
    for item in wanted:
        if not (isinstance(item, list) and len(item) == 2 and item[1] == position):
            break
        entry = index.prefixes.get(item[0])
        if entry is None or entry.kind != "chunk":
            break
        own = entry.token_ids[entry.lead_tokens :]
        if tuple(ids[position : position + len(own)]) != own:
            break  # not this snippet's tokens here: its KV is never placed
        found.append(Placement(entry.name, entry.lead_tokens, position, len(own)))
        position += len(own)
    last = params.get(COMPUTE_LAST_KEY, 0)
    return found, last if isinstance(last, int) and last >= 0 else 0


def chunk_segments(index: Any, placement: Placement) -> list[tuple[str, int, int]]:
    """The chunk's stored segments (hash, start, length) holding its own tokens."""
    out = []
    for info in index.chain(placement.name):
        if info.start + info.length > placement.lead:
            out.append((info.hash, info.start, info.length))
    return out


def moved(
    segment: Any, lo: int, hi: int, delta: int, rotary: Any
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per layer, a stored segment's keys (re-rotated `delta` positions) and values of its
    local positions [lo, hi), as [kv_heads, n, head_dim]."""

    keys = [rerotate(k[:, lo:hi], delta, rotary) for k in segment.keys]
    values = [v[:, lo:hi] for v in segment.values]
    return keys, values
