"""Spans that pruning must never remove, and which tokens of code may be removed at all."""

from __future__ import annotations

import re
from typing import Any

from copilot_cli.core.errors import InputError
from copilot_cli.core.syntax import parser_for

NUMBERS = re.compile(r"(?<![\w.])[-+]?(?:0[xob][0-9a-fA-F_]+|\d[\d_]*(?:\.\d+)?(?:e[-+]?\d+)?)")
NEGATIONS = re.compile(
    r"\b(?:not|no|never|none|nothing|neither|nor|without|cannot|isn't|"
    r"aren't|wasn't|weren't|don't|doesn't|didn't|won't|can't|shouldn't|"
    r"mustn't)\b|!=|!(?!=)|\bn't\b",
    re.IGNORECASE,
)
NEWLINES = re.compile(r"\n")  # prose keeps its line structure
PROSE_NAMES = re.compile(
    r"`+[^`]*?`+"  # inline code
    r"|\bhttps?://[^\s<>\"')\]]+"  # URLs
    r"|\b[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)+"  # capitalised multi-word names
    r"|\b[a-z]+(?:_[a-z0-9]+)+\b|\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z]+[A-Z]\w*\b"  # identifiers
)


def compile_patterns(patterns: tuple[str, ...]) -> list[re.Pattern]:
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise InputError(
                f"regex {pattern!r} does not compile ({exc})", where="--protect"
            ) from exc
    return compiled


def spans_of(text: str, patterns: list[re.Pattern]) -> list[tuple[int, int]]:
    return [m.span() for p in patterns for m in p.finditer(text) if m.end() > m.start()]


def mark(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[bool]:
    """True for every token overlapping one of `spans` (character offsets)."""
    import bisect

    spans = sorted(spans)
    starts = [s for s, _ in spans]
    reach, best = [], -1
    for _, end in spans:
        best = max(best, end)
        reach.append(best)
    marked = []
    for start, end in offsets:
        index = bisect.bisect_left(starts, end) - 1
        marked.append(index >= 0 and reach[index] > start)
    return marked


def contained(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[bool]:
    """True for every token lying entirely inside one of `spans`."""
    import bisect

    spans = sorted(spans)
    starts = [s for s, _ in spans]
    out = []
    for start, end in offsets:
        index = bisect.bisect_right(starts, start) - 1
        out.append(index >= 0 and spans[index][1] >= end and end > start)
    return out


def code_removable_spans(text: str, language: str) -> list[tuple[int, int]] | None:
    """Character spans inside comments and string contents (after their first character):
    the only places a token can go without touching code. None when the text is not code."""
    parser = parser_for(language)
    if parser is None:
        return None
    data = text.encode("utf-8")
    tree = parser.parse(data)
    if tree.root_node.has_error:
        return None
    byte_to_char = _byte_to_char(text)
    spans = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type in ("comment", "line_comment", "block_comment"):
            marker = 2 if data[node.start_byte : node.start_byte + 2] in (b"//", b"/*") else 1
            spans.append((byte_to_char(node.start_byte + marker), byte_to_char(node.end_byte)))
        elif node.type in ("string_content", "string_fragment"):
            spans.append((byte_to_char(node.start_byte), byte_to_char(node.end_byte)))
        else:
            stack.extend(node.children)
    return spans


def _byte_to_char(text: str) -> Any:
    if text.isascii():
        return lambda b: b
    positions = []
    for index, char in enumerate(text):
        positions.extend([index] * len(char.encode("utf-8")))
    positions.append(len(text))
    return lambda b: positions[b]


def looks_like_code(text: str) -> str | None:
    """The language of `text` when it is code we can check (today: Python), else None."""
    parser = parser_for("python")
    if parser is None:
        return None
    tree = parser.parse(text.encode("utf-8"))
    if tree.root_node.has_error:
        return None
    kinds = {child.type for child in tree.root_node.named_children}
    code_kinds = {
        "function_definition",
        "class_definition",
        "import_statement",
        "import_from_statement",
        "decorated_definition",
        "if_statement",
        "for_statement",
        "while_statement",
        "return_statement",
        "assignment",
    }
    if kinds & code_kinds or any(
        c.type == "expression_statement"
        and c.named_child_count
        and c.named_children[0].type == "assignment"
        for c in tree.root_node.named_children
    ):
        return "python"
    return None
