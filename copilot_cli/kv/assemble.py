"""One request's cache from prepared parts: a stored static prefix, then stored chunk KV placed at
the positions the request gives them (keys re-rotated, values as they are), then pieces with no
stored KV computed over what is assembled; with selective recompute of the placed chunks.

Why recompute: a chunk's KV was computed with only a canonical lead before it, so from the
second layer on its tokens never saw the real preceding context. CacheBlend (EuroSys '25)
recomputes the tokens whose KV deviates most. The rule here is positional: the first `ratio`
of each placed chunk's tokens (at least its first token). Those tokens stood right after the
lead, and a model's attention pools on a sequence's first tokens, so their stored KV is the
most wrong. Measured on SmolLM2-135M (bench_chunk_kv):
- the tokens whose layer-1 values move most once layer 0 has seen the real context (the rule
  used before) are mostly there: 58% of them among the first 40 of their chunk (12 prompts);
- recomputing the first 15% of each chunk gives a mean KL of 0.024 against a full prefill,
  the 15% whose layer-1 values moved most 0.032 (50 prompts).
The layer-1 rule also needs layer 0 over every placed token first, over a third of its cost;
a positional choice is known before anything runs.

One pass does it all. Every stored piece is written at its position first. Then the chosen
chunk tokens go through the decoder stack in one pass, with every computed piece between and
after the chunks, each token attending to the positions up to its own. That is what computing
them one by one in order gives:
- a chosen token's fresh KV replaces the stored one before any later token reads it;
- the code after the chunks reads recomputed KV.
It costs no model call, cache rebuild or split per piece (5 pieces between snippets on a
12-layer model: 357 ms in order, 148 ms at once).

Cost: L layers over `ratio` of the placed tokens, against L layers over all of them for a full
prefill.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from copilot_cli.core import lazy
from copilot_cli.core.errors import InputError
from copilot_cli.kv.loader import KVCacheDir, PrefixStore, build_cache, check_model, read_chain
from copilot_cli.kv.prefill import extend
from copilot_cli.kv.rope import Rotary, rerotate, rotary_of

transformers = lazy.module("transformers")

DEFAULT_RECOMPUTE = 0.15
_CHUNK_SIZE = 512


@dataclass(frozen=True)
class StoredPiece:
    """Chunk KV as stored: its token ids and per-layer keys/values ([kv_heads, n, head_dim])
    computed at positions [start, start + n)."""

    token_ids: list[int]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    start: int


@dataclass
class Assembled:
    """The cache of a prompt's first `len(token_ids)` tokens and how it was made."""

    token_ids: list[int]
    cache: Any
    prefix_tokens: int
    placed_tokens: int
    computed_tokens: int
    recomputed_tokens: int


def assemble_cache(
    model: Any,
    prefix: StoredPiece | None,
    pieces: list[StoredPiece | list[int]],
    *,
    recompute: float = DEFAULT_RECOMPUTE,
) -> Assembled:
    """The cache for prefix + pieces in order: a `StoredPiece` is placed (keys re-rotated to
    its position), a list of ids is computed, and `recompute` (0..1) of each placed piece's
    tokens, its first ones, are computed again (the module's rule), all in one pass, each
    token over what comes before it. `prefix` must have been computed at position 0 (a
    stored static prefix).

    Raises:
        InputError: a model whose keys cannot move (no RoPE, length-dependent RoPE, a prompt
            longer than its sliding window), or a recompute ratio outside [0, 1].
    """
    if not 0.0 <= recompute <= 1.0:
        raise InputError(f"recompute ratio {recompute} is not within 0..1", where="--recompute")
    total = (len(prefix.token_ids) if prefix else 0) + sum(
        len(p.token_ids if isinstance(p, StoredPiece) else p) for p in pieces
    )
    rotary = rotary_of(model, prompt_tokens=total)
    if prefix is not None and prefix.start != 0:
        raise InputError("a stored prefix must start at position 0", where="prefix")
    placing = any(isinstance(p, StoredPiece) for p in pieces)
    if placing and recompute > 0 and not _stack(model):
        raise InputError(
            f"selective recompute needs a decoder stack (model.layers, embed_tokens, rotary_emb); "
            f"{getattr(model.config, 'model_type', 'this model')} has none: use --recompute 0",
            where="--recompute",
        )
    with torch.no_grad():
        laid = _lay_out(model, prefix, pieces, rotary, recompute if placing else 0.0)
    ids, joined_k, joined_v, placed, computed, recomputed = laid
    return Assembled(
        token_ids=ids,
        cache=build_cache(model, joined_k, joined_v) if joined_k else _empty(model),
        prefix_tokens=len(prefix.token_ids) if prefix else 0,
        placed_tokens=sum(n for _, n in placed),
        computed_tokens=computed,
        recomputed_tokens=recomputed,
    )


_LaidOut = tuple[list[int], list[torch.Tensor], list[torch.Tensor], list[tuple[int, int]], int, int]


def _lay_out(
    model: Any,
    prefix: StoredPiece | None,
    pieces: list[StoredPiece | list[int]],
    rotary: Rotary,
    recompute: float,
) -> _LaidOut:
    """(ids, keys, values per layer, (start, length) of each placed piece, computed tokens,
    recomputed tokens)."""
    stored = [p for p in ([prefix] if prefix else []) + pieces if isinstance(p, StoredPiece)]
    computing = recompute > 0 or any(not isinstance(p, StoredPiece) for p in pieces)
    if stored and computing and _stack(model):
        return _lay_out_at_once(model, prefix, pieces, rotary, stored, recompute)
    return (*_lay_out_in_order(model, prefix, pieces, rotary), 0)


def _stack(model: Any) -> bool:
    base = getattr(model, "model", model)
    return all(hasattr(base, name) for name in ("layers", "embed_tokens", "rotary_emb"))


def _lay_out_at_once(
    model: Any,
    prefix: StoredPiece | None,
    pieces: list[StoredPiece | list[int]],
    rotary: Rotary,
    stored: list[StoredPiece],
    recompute: float,
) -> _LaidOut:
    """Every stored piece written at its position first, then every computed token and the
    first `recompute` of each placed piece's tokens in one pass through the decoder stack,
    each attending to all positions up to its own (what computing them one by one, in order,
    gives; one pass instead of a model call, a cache rebuild and a split per piece)."""
    device = next(model.parameters()).device
    ids = list(prefix.token_ids) if prefix else []
    spans: list[tuple[StoredPiece, int]] = [(prefix, 0)] if prefix else []
    placed: list[tuple[int, int]] = []
    computed: list[int] = []
    for piece in pieces:
        if isinstance(piece, StoredPiece):
            placed.append((len(ids), len(piece.token_ids)))
            spans.append((piece, len(ids)))
            ids += piece.token_ids
        else:
            computed += range(len(ids), len(ids) + len(piece))
            ids += list(piece)
    keys, values = [], []
    for layer in range(len(stored[0].keys)):
        kv_heads, _, head_dim = stored[0].keys[layer].shape
        shape, dtype = (1, kv_heads, len(ids), head_dim), stored[0].keys[layer].dtype
        keys.append(torch.zeros(shape, dtype=dtype, device=device))
        values.append(torch.zeros(shape, dtype=stored[0].values[layer].dtype, device=device))
        for piece, at in spans:
            end = at + len(piece.token_ids)
            keys[layer][0, :, at:end] = rerotate(piece.keys[layer], at - piece.start, rotary)
            values[layer][0, :, at:end] = piece.values[layer]
    again = _recomputed(placed, recompute) if recompute > 0 else []
    base = getattr(model, "model", model)
    positions = torch.tensor(sorted(computed + again), dtype=torch.long, device=device)
    if len(positions):
        hidden = base.embed_tokens(torch.tensor([ids], device=device)[:, positions])
        _run_layers(base, base.layers, hidden, positions, _ScatterCache(keys, values), len(ids))
    return ids, [k[0] for k in keys], [v[0] for v in values], placed, len(computed), len(again)


def _recomputed(placed: list[tuple[int, int]], ratio: float) -> list[int]:
    """The positions recomputed: the first `ratio` of each placed piece's tokens (rounded, at
    least its first token)."""
    chosen: list[int] = []
    for start, length in placed:
        chosen += range(start, start + min(length, max(1, round(ratio * length))))
    return chosen


def _lay_out_in_order(
    model: Any, prefix: StoredPiece | None, pieces: list[StoredPiece | list[int]], rotary: Rotary
) -> tuple[list[int], list[torch.Tensor], list[torch.Tensor], list[tuple[int, int]], int]:
    """Piece by piece: stored ones placed, computed ones run over the cache assembled so far
    (models without a decoder stack the one-pass layout can drive)."""

    stored = [p for p in ([prefix] if prefix else []) + pieces if isinstance(p, StoredPiece)]
    layers = len(stored[0].keys) if stored else 0
    keys: list[list[torch.Tensor]] = [[] for _ in range(layers)]
    values: list[list[torch.Tensor]] = [[] for _ in range(layers)]
    if prefix is not None:
        _place(keys, values, prefix, 0, rotary)
    ids = list(prefix.token_ids) if prefix else []
    placed: list[tuple[int, int]] = []
    computed = 0
    cache = None
    for piece in pieces:
        if isinstance(piece, StoredPiece):
            if cache is not None:  # computed pieces went into the cache: continue there
                keys, values = _split(cache)
                cache = None
            placed.append((len(ids), len(piece.token_ids)))
            _place(keys, values, piece, len(ids), rotary)
            ids += piece.token_ids
        else:
            if cache is None:
                cache = _cache_of(model, keys, values, build_cache)
            extend(model, cache, list(piece), _CHUNK_SIZE)
            ids += list(piece)
            computed += len(piece)
    if cache is not None:
        keys, values = _split(cache)
    own = bool(placed)  # a placed piece's tensors are the store's: hand back a copy
    joined_k = [torch.cat(p, dim=1) if len(p) > 1 or own else p[0] for p in keys]
    joined_v = [torch.cat(p, dim=1) if len(p) > 1 or own else p[0] for p in values]
    return ids, joined_k, joined_v, placed, computed


def _empty(model: Any) -> Any:
    return transformers.DynamicCache()


def _place(
    keys: list[list[torch.Tensor]],
    values: list[list[torch.Tensor]],
    piece: StoredPiece,
    position: int,
    rotary: Rotary,
) -> None:
    for layer, (k, v) in enumerate(zip(piece.keys, piece.values, strict=True)):
        keys[layer].append(rerotate(k, position - piece.start, rotary))
        values[layer].append(v)


def _cache_of(
    model: Any, keys: list[list[torch.Tensor]], values: list[list[torch.Tensor]], build: Any
) -> Any:
    if not keys or not keys[0]:
        return transformers.DynamicCache()
    joined_k = [torch.cat(parts, dim=1) if len(parts) > 1 else parts[0] for parts in keys]
    joined_v = [torch.cat(parts, dim=1) if len(parts) > 1 else parts[0] for parts in values]
    return build(model, joined_k, joined_v)


def _split(cache: Any) -> tuple[list[list[torch.Tensor]], list[list[torch.Tensor]]]:
    return (
        [[layer.keys[0]] for layer in cache.layers],
        [[layer.values[0]] for layer in cache.layers],
    )


class _ScatterCache:
    """What a decoder layer's attention sees: the whole assembled cache, with the keys/values
    of the tokens being run written at their positions before they attend."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        self.keys = keys  # [1, kv_heads, T, head_dim] per layer, written in place
        self.values = values
        self.positions = torch.empty(0, dtype=torch.long)

    def update(
        self, k: torch.Tensor, v: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys[layer_idx][:, :, self.positions] = k.to(self.keys[layer_idx].dtype)
        self.values[layer_idx][:, :, self.positions] = v.to(self.values[layer_idx].dtype)
        return self.keys[layer_idx], self.values[layer_idx]


def _run_layers(
    base: Any,
    layers: Any,
    hidden: torch.Tensor,
    positions: torch.Tensor,
    cache: _ScatterCache,
    length: int,
) -> torch.Tensor:
    position_ids = positions.unsqueeze(0)
    embeddings = base.rotary_emb(hidden, position_ids=position_ids)
    allowed = torch.arange(length, device=positions.device)[None, :] <= positions[:, None]
    mask = torch.zeros(allowed.shape, dtype=hidden.dtype, device=hidden.device)
    mask = mask.masked_fill(~allowed, torch.finfo(hidden.dtype).min)[None, None]
    cache.positions = positions
    for layer in layers:
        out = layer(
            hidden,
            attention_mask=mask,
            position_embeddings=embeddings,
            position_ids=position_ids,
            cache=cache,
        )
        hidden = out[0] if isinstance(out, tuple) else out
    return hidden


def load_piece(kv: Any, model: Any, name: str, *, tokenizer: Any | None = None) -> StoredPiece:
    """A stored prefix or chunk of `kv` (a KV folder path, KVCacheDir or PrefixStore) as a
    piece: every check of `load_prefix` made; a chunk's lead is left out (its own tokens start
    at `lead_tokens`)."""

    if isinstance(kv, PrefixStore):
        token_ids, keys, values = kv.tensors(name)
        entry = kv.kv.index.prefixes[name]
    else:
        folder = kv if isinstance(kv, KVCacheDir) else KVCacheDir(kv)
        check_model(folder.model_fingerprint, model, str(folder.path))
        stored = folder.prefix(name)
        paths = [folder.segment_path(h) for h in stored.segments]
        token_ids, keys, values = read_chain(paths, model, tokenizer)
        entry = folder.index.prefixes[name]
    lead = entry.lead_tokens
    return StoredPiece(
        token_ids=list(token_ids[lead:]),
        keys=[k[:, lead:] for k in keys],
        values=[v[:, lead:] for v in values],
        start=lead,
    )
