"""Token-boundary stability of a static prefix.

At serving time a prompt is fed as `prompt_ids(prefix) + continuation_ids(rest)`, with the
prefix ids coming from a KV cache. That equals `prompt_ids(prefix + rest)` only when no token
straddles the boundary (BPE merges "\\n" + "    " into one token, for example). We shorten the
prefix until, for every sample, the split tokenization equals the whole one.
"""

from __future__ import annotations

from typing import Any

from copilot_cli.core.tokens import common_prefix_length, continuation_ids, prompt_ids


def _char_end_of_token(tokenizer: Any, text: str, count: int) -> int:
    """Character offset where the first `count` tokens of `text` (no specials) end."""
    if count <= 0:
        return 0
    if not getattr(tokenizer, "is_fast", False):  # no offsets: cut at the previous line
        return text.rfind("\n", 0, max(0, len(text) - 1)) + 1
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)[
        "offset_mapping"
    ]
    return offsets[min(count, len(offsets)) - 1][1]


def stable_prefix(
    tokenizer: Any, prefix: str, renders: list[str], add_special: bool
) -> tuple[str, list[int]]:
    """The longest prefix of `prefix` at which every render splits cleanly, and its ids."""
    candidate = prefix
    while True:
        ids = prompt_ids(tokenizer, candidate, add_special=add_special)
        lead = len(ids) - len(continuation_ids(tokenizer, candidate))
        cut = None
        for text in renders:
            full = prompt_ids(tokenizer, text, add_special=add_special)
            split = ids + continuation_ids(tokenizer, text[len(candidate) :])
            if full != split:
                same = common_prefix_length(full, ids)
                # The last shared token may itself be a merge across the boundary: drop it.
                end = _char_end_of_token(tokenizer, text, same - lead - 1)
                cut = min(end, len(candidate) - 1) if cut is None else min(cut, end)
        if cut is None:
            return candidate, ids
        candidate = candidate[: max(cut, 0)]
