"""Greedy, token-exact packing of line-aligned pieces into chunks, with recursive splitting.

A file is a byte string. Every piece is a byte range [start, end); the pieces of a parent
partition its range, so the chunks of a file cover each byte exactly once. Siblings are packed
greedily while the chunk (with its scope header) fits the budget; a piece that alone does not
fit is split at its children (entities), then at lines, and a single over-long line at token
boundaries. Nothing is ever dropped, and every chunk is re-counted with the real tokenizer
before it is accepted.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from copilot_cli.core.tokens import count_tokens, encode_with_offsets

SEPARATOR = " · "


@dataclass
class Piece:
    start: int
    end: int
    node: Any = None  # a tree-sitter node to descend into when the piece is too large
    scope: tuple[str, ...] = ()


@dataclass
class RawChunk:
    start: int
    end: int
    scope: tuple[str, ...]
    token_count: int
    text: str
    header: str = ""
    mid_line: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class TokenCounter:
    """Exact token counts with the target tokenizer (fast backend when available)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.backend = getattr(tokenizer, "backend_tokenizer", None)

    def count(self, text: str) -> int:
        return count_tokens(self.tokenizer, text)

    def count_many(self, texts: list[str]) -> list[int]:
        if self.backend is not None:
            return [len(e.ids) for e in self.backend.encode_batch(texts, add_special_tokens=False)]
        return [self.count(t) for t in texts]

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Character spans of each token of `text`."""
        return encode_with_offsets(self.tokenizer, text)[1]


class FileText:
    """A file's bytes with line starts and decoding helpers (non-UTF-8 bytes survive)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.line_starts = [0]
        index = data.find(b"\n")
        while index != -1:
            self.line_starts.append(index + 1)
            index = data.find(b"\n", index + 1)
        if self.line_starts[-1] == len(data) and len(self.line_starts) > 1:
            self.line_starts.pop()

    def attach_token_starts(self, counter: TokenCounter) -> None:
        """Tokenize the whole file once; piece costs are then estimated by counting token
        starts inside a byte range (exact recounts happen per chunk, batched)."""
        import numpy as np

        try:
            text = self.data.decode("utf-8")
        except UnicodeDecodeError:
            return  # costs are counted exactly for non-UTF-8 files
        offsets = counter.offsets(text)
        raw = np.frombuffer(self.data, dtype=np.uint8)
        char_starts = np.flatnonzero((raw & 0xC0) != 0x80)  # byte offset of each character
        starts = np.array([s for s, _ in offsets], dtype=np.int64)
        starts = starts[starts < len(char_starts)]
        self.token_starts = char_starts[starts]

    token_starts = None

    def estimate(self, start: int, end: int) -> int | None:
        if self.token_starts is None:
            return None
        import numpy as np

        low, high = np.searchsorted(self.token_starts, [start, end])
        return int(high - low)

    def text(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8", errors="replace")

    def line_of(self, offset: int) -> int:
        """0-based line index holding byte `offset`."""
        return bisect.bisect_right(self.line_starts, offset) - 1

    def line_start(self, offset: int) -> int:
        return self.line_starts[self.line_of(offset)]

    def lines_in(self, start: int, end: int) -> list[tuple[int, int]]:
        """Line byte ranges inside [start, end) (the first/last may be partial)."""
        first = self.line_of(start)
        spans = []
        for index in range(first, len(self.line_starts)):
            line_start = max(self.line_starts[index], start)
            if line_start >= end:
                break
            line_end = (
                self.line_starts[index + 1] if index + 1 < len(self.line_starts) else len(self.data)
            )
            spans.append((line_start, min(line_end, end)))
        return spans


Splitter = Callable[[Piece], list[Piece] | None]


class Packer:
    """Packs pieces of one file into chunks no larger than `budget` tokens (header included)."""

    def __init__(
        self,
        file: FileText,
        counter: TokenCounter,
        budget: int,
        path: str,
        children: Splitter | None = None,
    ) -> None:
        self.file = file
        self.counter = counter
        self.budget = budget
        self.path = path
        self.children = children
        self._header_cost: dict[tuple[str, ...], int] = {}
        self._header: dict[tuple[str, ...], str] = {}

    def header(self, scope: tuple[str, ...]) -> str:
        """The scope header of an inner chunk: `path · class X · def y`, shortened to the
        innermost name, or left out, when it would take more than a quarter of the budget."""
        if not scope:
            return ""
        if scope not in self._header:
            limit = self.budget // 4
            chosen = ""
            for candidate in (SEPARATOR.join((self.path, *scope)), scope[-1]):
                if self.counter.count(candidate + "\n") <= limit:
                    chosen = candidate + "\n"
                    break
            self._header[scope] = chosen
        return self._header[scope]

    def header_cost(self, scope: tuple[str, ...]) -> int:
        if scope not in self._header_cost:
            header = self.header(scope)
            self._header_cost[scope] = self.counter.count(header) if header else 0
        return self._header_cost[scope]

    def run(self, pieces: list[Piece]) -> list[RawChunk]:
        """Pack, then recount every chunk exactly (batched) and repair the rare overshoot."""
        return self.finalize(self.pack(pieces))

    def _costs(self, pieces: list[Piece]) -> list[int]:
        estimates = [self.file.estimate(p.start, p.end) for p in pieces]
        if all(e is not None for e in estimates):
            return estimates  # type: ignore[return-value]
        return self.counter.count_many([self.file.text(p.start, p.end) for p in pieces])

    def pack(self, pieces: list[Piece]) -> list[RawChunk]:
        """Greedy packing on estimated costs; chunks are tentative until `finalize`."""
        chunks: list[RawChunk] = []
        costs = self._costs(pieces)
        group: list[Piece] = []
        group_cost = 0
        index = 0
        while index < len(pieces):
            piece, cost = pieces[index], costs[index]
            room = self.budget - self.header_cost(piece.scope)
            if group and group_cost + cost <= room:
                group.append(piece)
                group_cost += cost
                index += 1
                continue
            if group:
                chunks.append(self._tentative(group, group_cost))
                group, group_cost = [], 0
                continue
            if cost <= room:
                group, group_cost = [piece], cost
            else:
                chunks.extend(self.split(piece))
            index += 1
        if group:
            chunks.append(self._tentative(group, group_cost))
        return chunks

    def _tentative(self, group: list[Piece], cost: int) -> RawChunk:
        scope = group[0].scope
        start, end = group[0].start, group[-1].end
        chunk = RawChunk(
            start,
            end,
            scope,
            cost + self.header_cost(scope),
            self.file.text(start, end),
            self.header(scope),
        )
        chunk.extra["pieces"] = list(group)
        return chunk

    def finalize(self, chunks: list[RawChunk]) -> list[RawChunk]:
        pending = [c for c in chunks if not c.mid_line]
        counts = self.counter.count_many([c.header + c.text for c in pending])
        exact = {id(c): n for c, n in zip(pending, counts, strict=True)}
        out: list[RawChunk] = []
        for chunk in chunks:
            if chunk.mid_line:  # counted exactly when it was cut
                out.append(chunk)
                continue
            chunk.token_count = exact[id(chunk)]
            if chunk.token_count <= self.budget:
                chunk.extra.pop("pieces", None)
                out.append(chunk)
            else:
                out.extend(self._repair(chunk.extra["pieces"]))
        return out

    def _exact(self, group: list[Piece]) -> RawChunk | None:
        scope = group[0].scope
        start, end = group[0].start, group[-1].end
        text = self.file.text(start, end)
        header = self.header(scope)
        count = self.counter.count(header + text)
        return RawChunk(start, end, scope, count, text, header) if count <= self.budget else None

    def _repair(self, group: list[Piece]) -> list[RawChunk]:
        """A chunk the estimate let through over budget: shed trailing pieces, counting exactly."""
        out: list[RawChunk] = []
        while group:
            size = len(group)
            chunk = None
            while size > 0 and chunk is None:
                chunk = self._exact(group[:size])
                if chunk is None:
                    size -= 1
            if chunk is None:
                out.extend(self.finalize(self.split(group[0])))
                group = group[1:]
            else:
                out.append(chunk)
                group = group[size:]
        return out

    def split(self, piece: Piece) -> list[RawChunk]:
        """Split a piece that does not fit: children, then lines, then tokens."""
        sub = self.children(piece) if self.children is not None and piece.node is not None else None
        if sub and len(sub) > 1:
            return self.pack(sub)
        lines = self.file.lines_in(piece.start, piece.end)
        if len(lines) > 1:
            return self.pack([Piece(s, e, None, piece.scope) for s, e in lines])
        return self.split_line(piece)

    def split_line(self, piece: Piece) -> list[RawChunk]:
        """Cut one over-long line at token boundaries (the only mid-line split).

        Invalid UTF-8 bytes decode to one character each both with "replace" (what is
        tokenized) and "surrogateescape" (what maps back to bytes), so character positions
        line up and byte offsets stay exact.
        """
        raw = self.file.data[piece.start : piece.end]
        escaped = raw.decode("utf-8", errors="surrogateescape")
        visible = raw.decode("utf-8", errors="replace")
        offsets = self.counter.offsets(visible)
        header = self.header(piece.scope)
        room = max(self.budget - self.header_cost(piece.scope), 1)
        chunks: list[RawChunk] = []
        token, char_start, byte_start = 0, 0, piece.start
        while char_start < len(visible):
            take = room
            while True:
                last = min(token + take, len(offsets))
                char_end = len(visible) if last >= len(offsets) else offsets[last - 1][1]
                char_end = max(char_end, char_start + 1)
                text = visible[char_start:char_end]
                count = self.counter.count(header + text)
                if count <= self.budget or take == 1:
                    break
                take = max(1, take - (count - self.budget))
            byte_len = len(escaped[char_start:char_end].encode("utf-8", errors="surrogateescape"))
            chunks.append(
                RawChunk(
                    byte_start,
                    byte_start + byte_len,
                    piece.scope,
                    count,
                    text,
                    header,
                    mid_line=True,
                )
            )
            byte_start += byte_len
            char_start = char_end
            while token < len(offsets) and offsets[token][1] <= char_end:
                token += 1
        return chunks
