"""Serving in transformers: generate from a template with its prefix's KV loaded instead of
recomputed, and a request's stored snippets placed (the KV that kv/ produced and stores)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from copilot_cli.context import FILE_SEP_TOKENS, snippet_ids, snippet_text
from copilot_cli.core.errors import ArtifactError
from copilot_cli.core.models import cache_kwargs, truncate
from copilot_cli.core.tokens import continuation_ids, prompt_ids
from copilot_cli.kv import (
    KVCacheDir,
    PrefixStore,
    assemble_cache,
    chunk_name,
    lead_ids,
    load_piece,
    load_prefix,
)


def prepare_prompt(
    tokenizer: Any, bundle: Any, template: str, inputs: dict[str, Any]
) -> tuple[list[int], list[int]]:
    """(prefix ids, rest ids) of a rendered template, split at its static prefix; the rest cut
    at its context snippets (each tokenized alone, repository text as data), as a request
    with chunk KV is."""
    rendered = bundle.split(template, **inputs)
    add_special = bundle.entry(template).adds_special_tokens
    prefix = prompt_ids(tokenizer, rendered.static_prefix, add_special=add_special)
    snippets = inputs.get("context") or []
    if not snippets:
        return prefix, continuation_ids(tokenizer, rendered.rest)
    pieces, tail = context_pieces(tokenizer, rendered.rest, snippets, set())
    return prefix, [t for piece in pieces if isinstance(piece, list) for t in piece] + tail


@dataclass(frozen=True)
class StoredSnippet:
    """A snippet of the prompt whose chunk KV the folder holds: its stored name and the ids
    its stored tokens must be (its text as data, tokenized alone), checked before placement."""

    name: str
    ids: list[int]


def context_pieces(
    tokenizer: Any, rest: str, snippets: list[dict[str, str]], stored: set[str]
) -> tuple[list[StoredSnippet | list[int]], list[int]]:
    """The rest of a rendered prompt cut at every snippet: (pieces in order: the ids of the
    text before a snippet, then the snippet, a StoredSnippet when its chunk KV is stored, else
    its ids; the ids of what follows the last snippet). Each piece is tokenized alone (a chunk
    as it was stored), a snippet's repository text as data (`context.snippet_ids`)."""

    pieces: list[StoredSnippet | list[int]] = []
    cursor = 0
    for snippet in snippets:
        forms = [("xml", "<|file_sep|>")] + [("file-sep", s) for s in FILE_SEP_TOKENS]
        for fmt, separator in forms:
            form = snippet_text(snippet["path"], snippet["text"], fmt, separator)
            at = rest.find(form, cursor)
            if at < 0:
                continue
            if at > cursor:
                pieces.append(continuation_ids(tokenizer, rest[cursor:at]))
            ids = snippet_ids(tokenizer, form, fmt, separator)
            name = chunk_name(form)
            pieces.append(StoredSnippet(name, ids) if name in stored else ids)
            cursor = at + len(form)
            break
    return pieces, continuation_ids(tokenizer, rest[cursor:])


def assemble_request(
    model: Any,
    tokenizer: Any,
    bundle: Any,
    kv: Path | str | PrefixStore,
    template: str,
    inputs: dict[str, Any],
    context: Any,
    *,
    recompute: float,
) -> tuple[Any, list[int], list[str]]:
    """The cache of a request's static prefix and repository context from stored KV (the
    prefix as stored, each stored chunk placed where the prompt has it, recomputed at
    `recompute`), and the ids of the rest of the prompt. Returns (Assembled, rest ids, names
    taken from a PrefixStore: release them when done)."""

    inputs = {**inputs, "context": list(getattr(context, "context", context))}
    rendered = bundle.split(template, **inputs)
    add_special = bundle.entry(template).adds_special_tokens
    prefix_ids = prompt_ids(tokenizer, rendered.static_prefix, add_special=add_special)
    folder = kv.kv if isinstance(kv, PrefixStore) else KVCacheDir(kv)
    stored = {n for n, e in folder.index.prefixes.items() if e.kind == "chunk"}
    pieces, rest_ids = context_pieces(tokenizer, rendered.rest, inputs["context"], stored)
    taken: list[str] = []

    def piece(name: str) -> Any:
        if isinstance(kv, PrefixStore):
            taken.append(name)
        return load_piece(
            kv if isinstance(kv, PrefixStore) else folder, model, name, tokenizer=tokenizer
        )

    prefix = piece(template)
    if prefix.token_ids != prefix_ids:
        raise ArtifactError(
            f"the stored prefix of {template!r} has other tokens than the "
            "bundle's static prefix: rebuild it with prefill-kv"
        )
    lead = lead_ids(tokenizer)
    parts: list[Any] = []
    for p in pieces:
        if isinstance(p, StoredSnippet):
            placed = piece(p.name)
            entry = folder.index.prefixes[p.name]
            if placed.token_ids != p.ids or list(entry.token_ids[: placed.start]) != lead:
                raise ArtifactError(
                    f"the chunk KV {p.name[:22]}... holds other tokens than its snippet's "
                    "text (edited or resealed): rebuild it with prefill-kv --chunks",
                    where=str(folder.path / "index.json"),
                )
            parts.append(placed)
        else:
            parts.append(p)
    return assemble_cache(model, prefix, parts, recompute=recompute), rest_ids, taken


def generate_with_prefix(
    model: Any,
    tokenizer: Any,
    bundle: Any,
    kv: Path | str | PrefixStore,
    template: str,
    inputs: dict[str, Any],
    context: Any = None,
    recompute: float | None = None,
    **generate_kwargs: Any,
) -> torch.Tensor:
    """Render `template`, reuse its cached prefix, run only the rest, and generate.

    `context`: repository context for the template's `context` input: a ContextResult
    (`select_context`) or its list of `{path, text}` snippets; it comes after the static prefix,
    so the cached prefix is the same with or without it.

    `kv` is a KV folder or a `PrefixStore`. The cached prefix ids must equal the tokenized
    static prefix (else the KV is stale: rebuild it). At least one prompt token is always fed
    (a prompt that is all prefix feeds its last prefix token again, from a cache one shorter).
    `recompute` (with `context`): the context's chunks whose KV the folder stores (prefill-kv
    --chunks) are placed instead of computed, and that share of their tokens recomputed
    (kv/assemble.py); the prompt's ids are then its pieces' ids, each tokenized alone.
    Returns what `model.generate` returns: the prompt ids followed by the new ids.
    """
    if context is not None and recompute is not None:
        return _generate_assembled(
            model, tokenizer, bundle, kv, template, inputs, context, recompute, generate_kwargs
        )
    if context is not None:
        inputs = {**inputs, "context": list(getattr(context, "context", context))}
    prefix_ids, rest_ids = prepare_prompt(tokenizer, bundle, template, inputs)
    store = kv if isinstance(kv, PrefixStore) else None
    if store is not None:
        stored_ids = store.token_ids(template)
        cache = store.acquire(template)
    else:
        stored_ids = KVCacheDir(kv).prefix(template).token_ids
        cache = load_prefix(kv, model, template, tokenizer=tokenizer)
    try:
        if stored_ids != prefix_ids:
            raise ArtifactError(
                f"the stored prefix of {template!r} has other tokens than the "
                "bundle's static prefix: rebuild it with prefill-kv"
            )
        if not rest_ids:
            truncate(cache, len(prefix_ids) - 1)
        device = next(model.parameters()).device
        input_ids = torch.tensor([prefix_ids + rest_ids], device=device)
        return model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            **cache_kwargs(model, cache),
            **generate_kwargs,
        )
    finally:
        if store is not None:
            store.release(template)


def _generate_assembled(
    model: Any,
    tokenizer: Any,
    bundle: Any,
    kv: Any,
    template: str,
    inputs: dict[str, Any],
    context: Any,
    recompute: float,
    generate_kwargs: dict[str, Any],
) -> torch.Tensor:
    assembled, rest_ids, taken = assemble_request(
        model, tokenizer, bundle, kv, template, inputs, context, recompute=recompute
    )
    try:
        cache = assembled.cache
        if not rest_ids:
            truncate(cache, len(assembled.token_ids) - 1)
        device = next(model.parameters()).device
        input_ids = torch.tensor([assembled.token_ids + rest_ids], device=device)
        return model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            **cache_kwargs(model, cache),
            **generate_kwargs,
        )
    finally:
        for name in taken:
            kv.release(name)
