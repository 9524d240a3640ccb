"""Prose (Markdown, reStructuredText, plain text): sections, then paragraphs, then sentences.

Never split inside a fenced code block, an inline code span, a link or URL, or a name
(capitalised multi-word names such as "San Francisco"; CamelCase and snake_case identifiers are
single words and are only ever split by the token-level last resort). spaCy is not needed.
"""

from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass

from copilot_cli.chunking.packer import FileText, Piece

_FENCE = re.compile(rb"^\s{0,3}(```+|~~~+)")
_ATX = re.compile(rb"^\s{0,3}#{1,6}\s")
_RST_UNDERLINE = re.compile(rb"^([=\-~^\"'`#*+]){3,}\s*$")
_PROTECTED = re.compile(
    r"`+[^`]*?`+"  # inline code
    r"|!?\[[^\]\n]*\]\([^)\n]*\)"  # markdown link or image
    r"|<https?://[^>\s]+>"  # autolink
    r"|\bhttps?://[^\s<>\"')\]]+"  # bare URL
    r"|\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b"  # e-mail
    r"|\b[A-Z][\w'’-]*(?:\s+(?:of|de|da|van|von|der|la|le|y)?\s*[A-Z][\w'’-]*)+"  # names
)
_SENTENCE_END = re.compile(r"[.!?…][\"'”’)\]]*\s+")
_ABBREVIATIONS = {
    "dr",
    "mr",
    "mrs",
    "ms",
    "st",
    "prof",
    "sr",
    "jr",
    "vs",
    "etc",
    "e.g",
    "i.e",
    "fig",
    "no",
    "vol",
    "cf",
    "approx",
    "inc",
    "ltd",
    "co",
}


@dataclass(frozen=True)
class ProseNode:
    """A prose unit the packer may split further: a section, a paragraph or a sentence."""

    kind: str  # "section" | "paragraph" | "sentence" | "fence"
    title: str = ""


def _blocks(file: FileText, markdown: bool) -> list[tuple[int, int, str]]:
    """(start, end, kind) blocks: headings, fenced code, paragraphs; blank lines attach before."""
    lines = file.lines_in(0, len(file.data))
    blocks: list[tuple[int, int, str]] = []
    index = 0
    while index < len(lines):
        start, end = lines[index]
        raw = file.data[start:end]
        fence = _FENCE.match(raw) if markdown else None
        if fence:
            marker = fence.group(1)[:3]
            index += 1
            while index < len(lines) and not file.data[
                lines[index][0] : lines[index][1]
            ].lstrip().startswith(marker):
                index += 1
            index = min(index + 1, len(lines))
            blocks.append((start, lines[index - 1][1], "fence"))
            continue
        if not raw.strip():
            if blocks:
                blocks[-1] = (blocks[-1][0], end, blocks[-1][2])
            else:
                blocks.append((start, end, "paragraph"))
            index += 1
            continue
        underline = index + 1 < len(lines) and _RST_UNDERLINE.match(
            file.data[lines[index + 1][0] : lines[index + 1][1]]
        )
        if (markdown and _ATX.match(raw)) or underline:
            stop = lines[index + 1][1] if underline else end
            blocks.append((start, stop, "heading"))
            index += 2 if underline else 1
            continue
        first = index
        while index < len(lines):
            s, e = lines[index]
            chunk = file.data[s:e]
            if not chunk.strip() or (markdown and (_ATX.match(chunk) or _FENCE.match(chunk))):
                break
            if (
                index > first
                and index + 1 < len(lines)
                and _RST_UNDERLINE.match(file.data[lines[index + 1][0] : lines[index + 1][1]])
            ):
                break
            index += 1
        blocks.append((lines[first][0], lines[index - 1][1], "paragraph"))
    return blocks


def top_level_pieces(file: FileText, markdown: bool) -> list[Piece]:
    """One piece per section (a heading and what follows it up to the next heading)."""
    pieces: list[Piece] = []
    for start, end, kind in _blocks(file, markdown):
        if kind == "heading" or not pieces:
            title = (
                file.text(start, end).strip().splitlines()[0].lstrip("# ").strip()
                if kind == "heading"
                else ""
            )
            pieces.append(Piece(start, end, ProseNode("section", title[:60]), ()))
        else:
            last = pieces[-1]
            pieces[-1] = Piece(last.start, end, last.node, ())
    return pieces


def _protected(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _PROTECTED.finditer(text)]


def _inside(position: int, spans: list[tuple[int, int]]) -> bool:
    """Whether `position` lies strictly inside one of `spans` (in order, not overlapping, as
    finditer gives them): only the last span starting before it can hold it."""
    i = bisect.bisect_left(spans, (position,))
    return i > 0 and position < spans[i - 1][1]


def _to_bytes(text_escaped: str, char_index: int) -> int:
    return len(text_escaped[:char_index].encode("utf-8", errors="surrogateescape"))


def sentence_cuts(text: str) -> list[int]:
    """Character positions where a new sentence starts (outside protected spans)."""
    spans = _protected(text)
    cuts = []
    for match in _SENTENCE_END.finditer(text):
        end = match.end()
        if end >= len(text) or _inside(match.start(), spans) or _inside(end - 1, spans):
            continue
        word = re.search(r"([\w.]+)\W*$", text[: match.start() + 1])
        token = word.group(1).rstrip(".").lower() if word else ""
        if token in _ABBREVIATIONS or (len(token) == 1 and token.isalpha()):
            continue
        cuts.append(end)
    return cuts


def word_cuts(text: str) -> list[int]:
    """Positions after whitespace, outside protected spans (for sentences over the budget)."""
    spans = _protected(text)
    return [
        m.end()
        for m in re.finditer(r"\s+", text)
        if m.end() < len(text) and not _inside(m.start(), spans)
    ]


def make_children(file: FileText, markdown: bool):
    """The Packer's splitter for prose: section -> blocks -> sentences -> words."""

    def cut_at(
        piece: Piece, positions: list[int], kind: str, scope: tuple[str, ...]
    ) -> list[Piece]:
        raw = file.data[piece.start : piece.end]
        escaped = raw.decode("utf-8", errors="surrogateescape")
        bounds = [0, *(_to_bytes(escaped, p) for p in positions), len(raw)]
        return [
            Piece(piece.start + a, piece.start + b, ProseNode(kind), scope)
            for a, b in itertools.pairwise(bounds)
            if b > a
        ]

    def children(piece: Piece) -> list[Piece] | None:
        node = piece.node
        if not isinstance(node, ProseNode):
            return None
        if node.kind == "section":
            scope = piece.scope + ((node.title,) if node.title else ())
            return [
                Piece(s, e, ProseNode(k if k != "heading" else "paragraph"), scope)
                for s, e, k in _blocks_within(file, piece, markdown)
            ]
        text = file.data[piece.start : piece.end].decode("utf-8", errors="replace")
        if node.kind == "paragraph":
            sentences = sentence_cuts(text)
            if sentences:
                return cut_at(piece, sentences, "sentence", piece.scope)
            return cut_at(piece, word_cuts(text), "word", piece.scope)  # one long sentence
        if node.kind == "sentence":
            return cut_at(piece, word_cuts(text), "word", piece.scope)
        return None  # fences and words fall back to lines, then tokens

    return children


def _blocks_within(file: FileText, piece: Piece, markdown: bool) -> list[tuple[int, int, str]]:
    sub = FileText(file.data[piece.start : piece.end])
    return [(piece.start + s, piece.start + e, k) for s, e, k in _blocks(sub, markdown)]
