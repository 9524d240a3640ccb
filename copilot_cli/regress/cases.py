"""The token sequences a variant is scored on, and which positions count.

A case is (ids, split): logits at positions t in [split, len(ids) − 1) are compared, each
predicting ids[t + 1]. Variants that serve part of the sequence from a cache (kv, kv-dtype)
hold ids[:split] in the cache and compute only ids[split:]; the base always runs the whole
sequence at once. So every variant is compared with the original model on the same token ids.

Case sets:
    prompts   each prompt, split 0 (all positions)
    split     each prompt, split at half its tokens (the first half becomes a cache)
    kv:DIR    prompt i after the stored prefix i mod P of the KV folder, split at the prefix
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from copilot_cli import kv
from copilot_cli.core.errors import ArtifactError
from copilot_cli.core.prompt_sets import PromptCase
from copilot_cli.core.tokens import continuation_ids, prompt_ids


@dataclass(frozen=True)
class Case:
    id: str
    group: str
    ids: tuple[int, ...]
    split: int
    prefix: str | None = None  # stored prefix name for kv cases

    @property
    def scored(self) -> int:
        return max(len(self.ids) - 1 - self.split, 0)


def build_cases(
    case_set: str,
    prompts: list[PromptCase],
    tokenizer: Any,
    max_tokens: int,
    context_length: int = 1 << 30,
) -> list[Case]:
    """The cases of `case_set`; `max_tokens` bounds each prompt's own (dynamic) tokens."""
    cases = []
    if case_set.startswith("kv:"):
        kv_at = case_set[3:]
        stored = _stored_prefixes(kv_at)
        names = sorted(stored)
        if not names:
            raise ArtifactError("the KV folder holds no prefix: nothing to compare", where=kv_at)
        for index, item in enumerate(prompts):
            name = names[index % len(names)]
            prefix = list(stored[name])
            if prefix and max(prefix) >= len(tokenizer):  # its segments would not match either
                raise ArtifactError(
                    f"prefix {name} holds token id {max(prefix):,}, outside the tokenizer's "
                    f"{len(tokenizer):,}: the index is damaged",
                    where=f"{kv_at}/index.json",
                )
            room = max(context_length - len(prefix), 2)
            rest = continuation_ids(tokenizer, item.prompt)[: min(max_tokens, room)]
            cases.append(
                Case(
                    f"{item.id}@{name}",
                    item.task,
                    tuple(prefix + rest),
                    len(prefix),
                    name,
                )
            )
        return cases
    for item in prompts:
        ids = prompt_ids(tokenizer, item.prompt)[:max_tokens]
        split = max(1, len(ids) // 2) if case_set == "split" else 0
        cases.append(Case(item.id, item.task, tuple(ids), split))
    return cases


def cases_hash(cases: list[Case]) -> str:
    """Identity of a case set's token sequences and splits (what a baseline must match)."""
    digest = hashlib.sha256()
    for case in cases:
        digest.update(f"{case.id}|{case.split}|".encode())
        digest.update(",".join(map(str, case.ids)).encode() + b"\n")
    return digest.hexdigest()


def _stored_prefixes(folder: str) -> dict[str, tuple[int, ...]]:
    """name -> token ids of every prefix a KV folder (prefill-kv) or a llama.cpp slot folder
    (prefill-kv --engine llama.cpp) holds."""
    if (Path(folder) / kv.SLOTS_INDEX).is_file():
        return {p.name: p.token_ids for p in kv.read_slot_index(Path(folder)).prefixes}
    stored = kv.KVCacheDir(folder)
    return {name: stored.prefix(name).token_ids for name in stored.names()}
