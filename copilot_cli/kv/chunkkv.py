"""Chunk KV: each chunk's KV computed once, offline, in the snippet format `context` renders,
after a fixed canonical lead; placed at any position of a request at run time (kv/assemble.py).

In a KV folder a chunk is a prefix of kind "chunk" named `chunk/<sha256 of its snippet text>`
(one copy per distinct snippet text): its token ids are the lead's ids followed by the
snippet's own ids (tokenized alone), so the lead's segment is shared by every chunk in the
radix tree and each chunk's tokens are one segment after it. `lead_tokens` in the index entry
says where the chunk's own tokens start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from copilot_cli.chunking import read_pair
from copilot_cli.context import (
    XML_INTRO,
    file_sep_token,
    snippet_ids,
    snippet_text,
)
from copilot_cli.core.tokens import continuation_ids, prompt_ids
from copilot_cli.kv.options import PrefixSource
from copilot_cli.prompts import placeholder_inputs

CHUNK_PREFIX = "chunk/"
# The canonical start every chunk is computed after: the model's leading specials and the line
# that introduces repository context (what stands before the first snippet of a real prompt).
LEAD_TEXT = XML_INTRO


def chunk_name(snippet: str) -> str:
    """The stored name of a snippet's KV: content-addressed by its exact text."""
    return CHUNK_PREFIX + hashlib.sha256(snippet.encode("utf-8")).hexdigest()


def lead_ids(tokenizer: Any) -> list[int]:
    return prompt_ids(tokenizer, LEAD_TEXT, add_special=True)


def snippet_format(tokenizer: Any, fmt: str) -> tuple[str, str]:
    """(format, separator) as `context` chooses them: auto = file-sep when the tokenizer has
    the token, else xml."""
    separator = file_sep_token(tokenizer)
    chosen = fmt if fmt != "auto" else "file-sep" if separator else "xml"
    return chosen, separator or "<|file_sep|>"


def chunk_sources(
    chunks: Path,
    registry: Path | None,
    top: int | None,
    tokenizer: Any,
    tokenizer_fp: str,
    fmt: str = "auto",
) -> list[Any]:
    """A PrefixSource per distinct snippet of the chunks file (the `top` highest-ranked by the
    registry when given, else all, in file order), each = lead ids + snippet ids."""

    read, reg = read_pair(chunks, registry, tokenizer_fingerprint=tokenizer_fp)
    records = list(read.chunks)
    if reg is not None:
        by_id = {r.id: r for r in records}
        records = [by_id[e.id] for e in reg.entries if e.id in by_id]
    if top is not None:
        records = records[:top]
    items = [(r.first_path, r.text, f"chunk:{r.id}") for r in records]
    return snippet_sources(tokenizer, items, fmt)


def snippet_sources(
    tokenizer: Any, items: list[tuple[str, str, str]], fmt: str = "auto"
) -> list[Any]:
    """A PrefixSource per distinct snippet of (path, text, origin) items, in order: the lead's
    ids, then the snippet's own (tokenized alone, as a request's pieces are)."""

    chosen, separator = snippet_format(tokenizer, fmt)
    lead = lead_ids(tokenizer)
    sources: dict[str, Any] = {}
    for path, text, origin in items:
        snippet = snippet_text(path, text, chosen, separator)
        name = chunk_name(snippet)
        if name not in sources:
            ids = lead + snippet_ids(tokenizer, snippet, chosen, separator)
            sources[name] = PrefixSource(
                name=name,
                text=snippet,
                origin=origin,
                add_special=True,
                token_ids=tuple(ids),
                kind="chunk",
                lead_tokens=len(lead),
            )
    return list(sources.values())


_MARKER = {"path": "copilot-opt-marker.py", "text": "pass"}  # one snippet, to find where they go


def _with_marker(bundle: Any) -> Iterator[tuple[str, Any, Any]]:
    """(name, entry, rendered) of each template of `bundle` that takes `context`, rendered
    with placeholder inputs and the marker as its one snippet."""
    for name in bundle.templates():
        entry = bundle.entry(name)
        schema = entry.schema
        if "context" in schema.get("properties", {}):
            inputs = {**placeholder_inputs(schema), "context": [_MARKER]}
            yield name, entry, bundle.split(name, **inputs)


def _marker_text(form: str, separator: str) -> str:
    return snippet_text(_MARKER["path"], _MARKER["text"], form, separator)


def bundle_snippet_format(bundle: Any, tokenizer: Any, fmt: str = "auto") -> str:
    """`fmt`, or for auto the format the bundle's templates write their snippets in (what a
    request's prompt will hold, so stored snippets are found in it); auto again when no
    template takes context or they disagree."""
    if fmt != "auto":
        return fmt
    _, separator = snippet_format(tokenizer, fmt)
    found = set()
    for _, _, rendered in _with_marker(bundle):
        for form in ("xml", "file-sep"):
            if _marker_text(form, separator) in rendered.rest:
                found.add(form)
                break
    return found.pop() if len(found) == 1 else "auto"


OPENING_SUFFIX = "+context"  # the stored prefix of a template with its context block opened


def context_openings(bundle: Any, tokenizer: Any, fmt: str = "auto") -> list[Any]:
    """Per template of `bundle` that takes `context`: a prefix named TEMPLATE+context holding
    the static prefix's ids and then the ids of the text between it and the first snippet
    (tokenized alone, as a request's pieces are), so a request with context restores both and
    its snippets follow at once: one contiguous stored region, what an engine that cannot
    compute between stored pieces (vLLM's connector) needs."""

    chosen, separator = snippet_format(tokenizer, fmt)
    form = _marker_text(chosen, separator)
    out = []
    for name, entry, rendered in _with_marker(bundle):
        at = rendered.rest.find(form)
        if at < 0:
            continue  # the template writes its snippets in another format
        add_special = entry.adds_special_tokens
        ids = prompt_ids(tokenizer, rendered.static_prefix, add_special=add_special)
        ids += continuation_ids(tokenizer, rendered.rest[:at])
        out.append(
            PrefixSource(
                name=name + OPENING_SUFFIX,
                text=rendered.static_prefix + rendered.rest[:at],
                origin=f"template-context:{name}",
                add_special=add_special,
                token_ids=tuple(ids),
            )
        )
    return out
