"""How prompt text becomes token ids, the same way in every command.

`prompt_ids(text)` = the special tokens the tokenizer puts at the start of a sequence (BOS for
Llama-style tokenizers, nothing for GPT-2 style) + the text's ids without special tokens.
`continuation_ids(text)` = the ids of text that follows a prefix (no special tokens). So
`prompt_ids(prefix) + continuation_ids(rest)` is what a server feeds after a cached prefix.

`literal_ids(text)` = the ids of text that is data, not instructions (repository code, a file
being edited): a special token's spelling in it (`<|eos|>`, `<|im_start|>`) is encoded as the
text it is, never as the control id, except the `controls` the caller names (a snippet's file
separator). llama.cpp's server tokenizes an /infill request's extra context the same way.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterable
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


_LITERAL_LOCK = threading.Lock()


def _literal_backend(tokenizer: Any) -> Any | None:
    """A copy of the tokenizer's fast backend that encodes special tokens as text (made once
    per tokenizer; a copy, so the shared backend's behaviour never changes under a caller)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    cached = getattr(tokenizer, "_copilot_literal_backend", None)
    if cached is None:
        with _LITERAL_LOCK:
            cached = getattr(tokenizer, "_copilot_literal_backend", None)
            if cached is None:
                cached = type(backend).from_str(backend.to_str())
                cached.encode_special_tokens = True
                with contextlib.suppress(AttributeError):
                    tokenizer._copilot_literal_backend = cached
    return cached


def _literal_segment_ids(tokenizer: Any, text: str) -> list[int]:
    if not text:
        return []
    backend = _literal_backend(tokenizer)
    if backend is not None:
        return list(backend.encode(text, add_special_tokens=False).ids)
    return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True).input_ids)


def literal_ids(tokenizer: Any, text: str, controls: Iterable[str] = ()) -> list[int]:
    """Ids of `text` as data: special-token spellings in it are text; each of `controls`
    (strings that are single tokens of the vocabulary) stays its one id."""
    wanted = [c for c in controls if c]
    if not wanted:
        return _literal_segment_ids(tokenizer, text)
    ids: list[int] = []
    pattern = "(" + "|".join(re.escape(c) for c in sorted(wanted, key=len, reverse=True)) + ")"
    for k, part in enumerate(re.split(pattern, text)):
        if k % 2:
            ids.append(tokenizer.convert_tokens_to_ids(part))
        else:
            ids += _literal_segment_ids(tokenizer, part)
    return ids


def literal_counts(tokenizer: Any, texts: list[str]) -> list[int]:
    """Token counts of several data texts (no controls), encoded in one batch."""
    backend = _literal_backend(tokenizer)
    if backend is None:
        return [len(_literal_segment_ids(tokenizer, t)) for t in texts]
    return [len(e.ids) for e in backend.encode_batch(texts, add_special_tokens=False)]


def special_spellings(tokenizer: Any) -> tuple[str, ...]:
    """The spellings of the tokenizer's special tokens (what `literal_ids` keeps as text)."""
    cached = getattr(tokenizer, "_copilot_special_spellings", None)
    if cached is None:
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        found = {t.content for t in added.values() if getattr(t, "special", False)}
        found |= set(getattr(tokenizer, "all_special_tokens", ()) or ())
        cached = tuple(sorted(t for t in found if t))
        with contextlib.suppress(AttributeError):
            tokenizer._copilot_special_spellings = cached
    return cached
