"""A repository overview: the signatures of its most central definitions (registry rank), each
with the first line of its docstring or leading comment, within a token budget."""

from __future__ import annotations

from typing import Any

from copilot_cli.chunking import Registry
from copilot_cli.context.index import ContextIndex
from copilot_cli.context.render import render_overview
from copilot_cli.context.signatures import signature
from copilot_cli.core.tokens import special_spellings


def overview_lines(
    index: ContextIndex, registry: Registry | None, top: int, budget: int, tokenizer: Any
) -> tuple[list[str], list[dict[str, Any]]]:
    """Lines of the overview (most central first) that fit `budget` when rendered (recounted)."""
    position = {cid: i for i, cid in enumerate(index.ids)}
    specials = special_spellings(tokenizer)
    picked: list[str] = []
    entries: list[dict[str, Any]] = []
    considered = 0
    for entry in registry.entries if registry else ():
        if considered >= top:
            break
        kinds = [e for e in entry.entities if e.kind not in ("variable", "import")]
        i = position.get(entry.id)
        if not kinds or i is None:
            continue
        considered += 1
        for entity in kinds[:3]:
            found = signature(index.texts[i], entity.name)
            if found is None:
                continue
            sig, doc = found
            line = f"{index.paths[i][0]}: {sig}" + (f"  -- {doc}" if doc else "")
            if line in picked or any(s in line for s in specials):
                continue  # the overview is prefilled as prompt text: no control token in it
            trial = render_overview([*picked, line])
            if (
                len(tokenizer.backend_tokenizer.encode(trial, add_special_tokens=False).ids)
                > budget
            ):
                continue
            picked.append(line)
            entries.append({"id": entry.id, "path": index.paths[i][0], "name": entity.name})
    return picked, entries
