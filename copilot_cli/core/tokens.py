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
