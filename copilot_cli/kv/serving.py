"""Generate from a template with its prefix's KV loaded instead of recomputed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from copilot_cli.core.errors import ArtifactError
from copilot_cli.core.models import cache_kwargs
from copilot_cli.core.tokens import continuation_ids, prompt_ids
from copilot_cli.kv.loader import KVCacheDir, PrefixStore, load_prefix
from copilot_cli.kv.prefill import truncate


def prepare_prompt(
    tokenizer: Any, bundle: Any, template: str, inputs: dict[str, Any]
) -> tuple[list[int], list[int]]:
    """(prefix ids, rest ids) of a rendered template, split at its static prefix."""
    rendered = bundle.split(template, **inputs)
    add_special = bundle.entry(template)["format"] == "text"
    return (
        prompt_ids(tokenizer, rendered.static_prefix, add_special=add_special),
        continuation_ids(tokenizer, rendered.rest),
    )


def generate_with_prefix(
    model: Any,
    tokenizer: Any,
    bundle: Any,
    kv: Path | str | PrefixStore,
    template: str,
    inputs: dict[str, Any],
    context: Any = None,
    **generate_kwargs: Any,
) -> torch.Tensor:
    """Render `template`, reuse its cached prefix, run only the rest, and generate.

    `context`: repository context for the template's `context` input: a ContextResult
    (`select_context`) or its list of `{path, text}` snippets; it comes after the static prefix,
    so the cached prefix is the same with or without it.

    `kv` is a KV folder or a `PrefixStore`. The cached prefix ids must equal the tokenized
    static prefix (else the KV is stale: rebuild it). At least one prompt token is always fed
    (a prompt that is all prefix feeds its last prefix token again, from a cache one shorter).
    Returns what `model.generate` returns: the prompt ids followed by the new ids.
    """
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
