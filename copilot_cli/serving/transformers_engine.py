"""transformers serving an editor's whole request from a prefill-kv folder: the longest stored
prefix loaded, each stored snippet's KV placed and selectively recomputed (kv/assemble.py),
the rest computed, then greedy tokens. What `serve --engine transformers` runs (a machine with
no other engine, and the endpoint's tests)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from copilot_cli.core.errors import ArtifactError
from copilot_cli.core.models import cache_kwargs, context_length
from copilot_cli.kv import (
    KVCacheDir,
    PrefixStore,
    StoredPiece,
    assemble_cache,
    load_piece,
    rotary_of,
)
from copilot_cli.serving.generated import Generated

DEFAULT_RECOMPUTE = 0.15


class TransformersEngine:
    """A loaded model and its KV folder (prefixes and chunks), one request at a time."""

    name = "transformers"

    def __init__(self, kv_dir: Path, loaded: Any, recompute: float = DEFAULT_RECOMPUTE) -> None:

        self.model, self.tokenizer = loaded.model, loaded.tokenizer
        self.kv = KVCacheDir(kv_dir)
        self.store = PrefixStore(kv_dir, self.model, tokenizer=self.tokenizer)
        self.chunks = {n for n, e in self.kv.index.prefixes.items() if e.kind == "chunk"}
        if self.chunks:
            rotary_of(self.model)  # one line at start for a model whose keys cannot move
        self.recompute = recompute
        self.end_ids = _end_ids(self.model, self.tokenizer)
        self.lock = threading.Lock()
        self._taken: list[str] = []  # prefixes held by the running request

    @property
    def context_length(self) -> int:

        return context_length(self.model.config)

    def stored_chunks(self) -> set[str]:
        return set(self.chunks)

    def detokenize(self, tokens: list[int]) -> bytes:
        return self.tokenizer.decode(tokens).encode("utf-8")

    def generate(
        self, composed: Any, max_tokens: int, on_token: Callable[[int], bool] | None = None
    ) -> Generated:
        with self.lock, torch.no_grad():
            try:
                return self._generate(composed, max_tokens, on_token)
            finally:
                for name in self._taken:
                    self.store.release(name)
                self._taken = []

    def _generate(self, composed: Any, max_tokens: int, on_token: Any) -> Generated:

        ids = composed.ids
        started = time.perf_counter()
        prefix = self._longest(ids)
        stored = self._load(prefix) if prefix else None
        start = len(stored.token_ids) if stored else 0
        parts: list[Any] = []
        for segment in composed.segments():
            if segment.end <= start:
                continue
            if segment.stored in self.chunks and segment.start >= start:
                parts.append(self._piece(segment))
            else:
                parts.append(segment.ids[max(start - segment.start, 0) :])
        last = _split_last(parts)
        assembled = assemble_cache(self.model, stored, parts, recompute=self.recompute)
        logits = self._step(last, assembled.cache)
        first = time.perf_counter()
        tokens, reason = [], "length"
        while len(tokens) < max_tokens:
            token = int(logits.argmax())
            if token in self.end_ids:
                reason = "stop"
                break
            tokens.append(token)
            if on_token is not None and on_token(token) is False:
                reason = "stop"  # a stop string
                break
            if len(tokens) < max_tokens:
                logits = self._step(token, assembled.cache)
        done = time.perf_counter()
        return Generated(
            tokens=tokens,
            finish_reason=reason,
            prompt_tokens=len(ids),
            cached_tokens=assembled.prefix_tokens
            + assembled.placed_tokens
            - assembled.recomputed_tokens,
            recomputed_tokens=assembled.recomputed_tokens,
            prompt_ms=(first - started) * 1000,
            predicted_ms=(done - first) * 1000,
        )

    def _step(self, token: int, cache: Any) -> torch.Tensor:

        return self.model(torch.tensor([[token]]), **cache_kwargs(self.model, cache)).logits[0, -1]

    def _longest(self, ids: list[int]) -> str | None:
        """The longest stored prefix (not a chunk) the prompt starts with, leaving a token."""
        best, size = None, 0
        for name, entry in self.kv.index.prefixes.items():
            stored = entry.token_ids
            fits = len(stored) < len(ids) and tuple(ids[: len(stored)]) == stored
            if entry.kind == "prefix" and fits and len(stored) > size:
                best, size = name, len(stored)
        return best

    def _load(self, name: str) -> Any:

        self._taken.append(name)  # held until the request ends (PrefixStore counts uses)
        return load_piece(self.store, self.model, name)

    def _piece(self, segment: Any) -> Any:
        piece = self._load(segment.stored)
        if piece.token_ids != segment.ids:
            raise ArtifactError(
                f"the chunk KV {segment.stored[:22]}... holds other tokens than its snippet",
                where=str(self.kv.path / "index.json"),
            )
        return piece


def _split_last(parts: list[Any]) -> int:
    """Take the prompt's last token out of `parts` (it is fed to get the first logits)."""

    last = parts[-1]
    if isinstance(last, StoredPiece):  # a prompt ending in a stored snippet: its last token
        parts[-1] = StoredPiece(
            last.token_ids[:-1],
            [k[:, :-1] for k in last.keys],
            [v[:, :-1] for v in last.values],
            last.start,
        )
        return last.token_ids[-1]
    token = last[-1]
    if len(last) > 1:
        parts[-1] = last[:-1]
    else:
        parts.pop()
    return token


def _end_ids(model: Any, tokenizer: Any) -> set[int]:
    """The ids that end a generation: the model's generation config and the tokenizer's EOS."""
    found = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = set(found if isinstance(found, list) else [] if found is None else [found])
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids
