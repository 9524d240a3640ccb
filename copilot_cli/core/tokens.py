"""How prompt text becomes token ids, the same way in every command.

`prompt_ids(text)` = the special tokens the tokenizer puts at the start of a sequence (BOS for
Llama-style tokenizers, nothing for GPT-2 style) + the text's ids without special tokens.
`continuation_ids(text)` = the ids of text that follows a prefix (no special tokens). So
`prompt_ids(prefix) + continuation_ids(rest)` is what a server feeds after a cached prefix.
"""

from __future__ import annotations

import contextlib
from typing import Any


def leading_special_ids(tokenizer: Any) -> list[int]:
    """Special token ids the tokenizer adds in front of every sequence (e.g. [BOS] or [])."""
    cached = getattr(tokenizer, "_copilot_leading_special_ids", None)
    if cached is not None:
        return list(cached)
    probe = "x"
    plain = tokenizer(probe, add_special_tokens=False).input_ids
    full = tokenizer(probe, add_special_tokens=True).input_ids
    leading: list[int] = []
    if plain and len(full) >= len(plain):
        for start in range(len(full) - len(plain) + 1):
            if full[start : start + len(plain)] == plain:
                leading = list(full[:start])
                break
    with contextlib.suppress(AttributeError):
        tokenizer._copilot_leading_special_ids = tuple(leading)
    return leading


def continuation_ids(tokenizer: Any, text: str) -> list[int]:
    """Token ids of `text` with no special tokens added."""
    if not text:
        return []
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def prompt_ids(tokenizer: Any, text: str, *, add_special: bool = True) -> list[int]:
    """Token ids of a whole prompt: leading specials (when `add_special`) + the text's ids."""
    lead = leading_special_ids(tokenizer) if add_special else []
    return lead + continuation_ids(tokenizer, text)


def encode_with_offsets(tokenizer: Any, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids of `text` (no special tokens) and each token's character span."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        encoding = backend.encode(text, add_special_tokens=False)
        return list(encoding.ids), [tuple(o) for o in encoding.offsets]
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return list(encoded["input_ids"]), [tuple(o) for o in encoded["offset_mapping"]]


def count_tokens(tokenizer: Any, text: str) -> int:
    """Number of tokens of `text` without special tokens (fast backend when available)."""
    if not text:
        return 0
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return len(backend.encode(text, add_special_tokens=False).ids)
    return len(tokenizer(text, add_special_tokens=False).input_ids)


def common_prefix_length(a: list[int] | tuple[int, ...], b: list[int] | tuple[int, ...]) -> int:
    """How many leading ids `a` and `b` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
