"""Chunk one file: pick the splitter (code, prose, fallback) and describe each chunk."""

from __future__ import annotations

import bisect
import hashlib
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from copilot_cli.chunking import code, prose
from copilot_cli.chunking.languages import (
    EXTENSIONS,
    PROSE,
    entities_and_comments,
    parser_for,
)
from copilot_cli.chunking.packer import SEPARATOR, FileText, Packer, Piece, TokenCounter


@dataclass
class FileChunk:
    path: str
    language: str
    start_line: int  # 1-based, inclusive
    end_line: int
    start_byte: int
    end_byte: int
    token_count: int
    sha256: str
    text: str
    scope: str
    header: str
    entities: list[dict[str, str]] = field(default_factory=list)
    syntax_hash: str = ""
    mid_line: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict (what `dataclasses.asdict` gives, without its deep copies)."""
        out = {name: getattr(self, name) for name in _CHUNK_FIELDS}
        out["entities"] = [dict(e) for e in self.entities]
        return out


_CHUNK_FIELDS = tuple(f.name for f in fields(FileChunk))


@dataclass
class FileReport:
    path: str
    language: str
    chunks: list[FileChunk]
    mode: str  # "code" | "prose" | "fallback"
    parse_error: bool = False
    non_utf8: bool = False


def language_of(path: str) -> tuple[str, str]:
    """(language, mode) for a path: a tree-sitter language, prose, or plain text fallback."""
    suffix = Path(path).suffix.lower()
    if suffix in EXTENSIONS:
        return EXTENSIONS[suffix], "code"
    if suffix in PROSE:
        return PROSE[suffix], "prose"
    name = Path(path).name.lower()
    if name in ("readme", "license", "changelog", "authors", "notice"):
        return "text", "prose"
    return suffix.lstrip(".") or "text", "fallback"


def _normalized_hash(text: str) -> str:
    return hashlib.sha256(re.sub(r"\s+", " ", text).strip().encode()).hexdigest()


def _syntax_hash(data: bytes, start: int, end: int, comments: list[tuple[int, int]]) -> str:
    """Hash of the chunk's code with comments removed and whitespace collapsed: equal for code
    that differs only in formatting and comments (the near-duplicate test)."""
    first = bisect.bisect_left(comments, (start, -1))
    pieces, position = [], start
    for c_start, c_end in comments[max(first - 1, 0) :]:
        if c_start >= end:
            break
        if c_end <= start:
            continue
        pieces.append(data[position : max(c_start, position)])
        position = max(position, min(c_end, end))
    pieces.append(data[position:end])
    normalized = b"".join(b"".join(pieces).split())  # tokens never need whitespace to compare
    return hashlib.sha256(normalized).hexdigest()


def _fallback_pieces(file: FileText) -> list[Piece]:
    """Blocks of lines separated by blank lines (blank lines attach to the block before)."""
    pieces: list[Piece] = []
    previous_blank = True
    for start, end in file.lines_in(0, len(file.data)):
        blank = not file.data[start:end].strip()
        if pieces and (blank or not previous_blank):
            pieces[-1] = Piece(pieces[-1].start, end, None, ())
        else:
            pieces.append(Piece(start, end, None, ()))
        previous_blank = blank
    return pieces


def _split(
    file: FileText, data: bytes, language: str, mode: str, report: FileReport
) -> tuple[list, list[tuple[int, int]] | None, Any, list[Piece]]:
    """(entities, comment ranges, child splitter, top-level pieces) of a file: tree-sitter for
    code that parses, sentences for prose, blank-line blocks otherwise (noted in `report`)."""
    parser = parser_for(language) if mode == "code" else None
    tree = parser.parse(data) if parser is not None else None
    if tree is not None and not tree.root_node.has_error:
        entities, comments = entities_and_comments(language, tree.root_node)
        return (
            entities,
            comments,
            code.make_children(file),
            code.top_level_pieces(file, tree.root_node),
        )
    if mode == "prose":
        markdown = language == "markdown"
        return [], None, prose.make_children(file, markdown), prose.top_level_pieces(file, markdown)
    report.parse_error = tree is not None
    report.mode = "fallback"
    return [], None, None, _fallback_pieces(file)


def chunk_file(data: bytes, rel: str, counter: TokenCounter, budget: int) -> FileReport:
    """Split one file's bytes into chunks of at most `budget` tokens that cover it exactly."""
    language, mode = language_of(rel)
    file = FileText(data)
    try:
        data.decode("utf-8")
        non_utf8 = False
    except UnicodeDecodeError:
        non_utf8 = True
    report = FileReport(path=rel, language=language, chunks=[], mode=mode, non_utf8=non_utf8)
    if not data:
        return report
    entities, comments, children, pieces = _split(file, data, language, mode, report)
    packer = Packer(file, counter, budget, rel, children)
    entity_starts = [e.start for e in entities]
    if mode == "code" or mode == "fallback" or mode == "prose":
        file.attach_token_starts(counter)
    for raw in packer.run(pieces):
        inside = entities[
            bisect.bisect_left(entity_starts, raw.start) : bisect.bisect_left(
                entity_starts, raw.end
            )
        ]
        syntax = (
            _syntax_hash(data, raw.start, raw.end, comments)
            if comments is not None
            else _normalized_hash(raw.text)
        )
        end_byte_inclusive = max(raw.end - 1, raw.start)
        report.chunks.append(
            FileChunk(
                path=rel,
                language=language,
                start_line=file.line_of(raw.start) + 1,
                end_line=file.line_of(end_byte_inclusive) + 1,
                start_byte=raw.start,
                end_byte=raw.end,
                token_count=raw.token_count,
                sha256=hashlib.sha256(raw.text.encode("utf-8")).hexdigest(),
                text=raw.text,
                scope=SEPARATOR.join((rel, *raw.scope)),
                header=raw.header,
                entities=[{"name": e.name, "kind": e.kind} for e in inside],
                syntax_hash=syntax,
                mid_line=raw.mid_line,
            )
        )
    return report
