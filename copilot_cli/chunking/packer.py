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
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from copilot_cli.chunking.families import UNKNOWN, WS, Family, byte_classes
from copilot_cli.chunking.pretoken import PieceCache
from copilot_cli.chunking.rules import chunk_rule
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


# Counting a chunk from the file's one tokenizer pass (see docs/chunk.md, "exact counts").
#
# A byte-level BPE tokenizer of a known pre-tokenizer family (families.py) encodes each piece
# on its own, and each family's pattern has "anchors": two adjacent non-space characters that
# no piece can hold together (for GPT-2's regex, characters of different classes among
# letter, digit and other, but an apostrophe before a letter), whatever surrounds them, while
# the pieces on either side do not depend on what lies beyond them. Between two such anchors
# a and b inside a chunk, the chunk's pieces are the file's pieces, so its tokens there are
# the file pass's tokens; only the two edges, header + text[start:a] and text[b:end], are
# encoded again. Other tokenizers recount every chunk (exact, slower);
# tests/chunking/test_exact_counts.py and test_families.py check the rules on random text.


class TokenCounter:
    """Exact token counts with the target tokenizer (fast backend when available)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.backend = getattr(tokenizer, "backend_tokenizer", None)
        known = getattr(tokenizer, "_copilot_chunk_rule", None)  # one parse per tokenizer
        if known is None:
            family, added, lengths = chunk_rule(tokenizer)
            known = (family, added, None, None)
            if family is not None:  # byte lengths and a piece cache, shared by its counters
                cache = PieceCache(self.backend, added, family)
                if family.prepend and cache.model is None:  # its BPE model disagrees: recount
                    family, cache = None, None
                known = (family, added, None if family is None else lengths, cache)
            with contextlib.suppress(AttributeError):
                tokenizer._copilot_chunk_rule = known
        self.family, self.added_tokens, self._byte_lengths, self.pieces = known
        self.additive = self.family is not None

    def count(self, text: str) -> int:
        if self.pieces is not None:
            return self.pieces.count(text)
        return count_tokens(self.tokenizer, text)

    def count_many(self, texts: list[str], continued: list[bool] | None = None) -> list[int]:
        """Counts of `texts`; `continued[i]`: text i goes on from earlier text (a derived
        chunk's tail), which only SentencePiece's prepended "▁" tells apart."""
        if self.pieces is not None:
            return list(map(self.pieces.count, texts, continued or [False] * len(texts)))
        if self.backend is not None:
            encode = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)
            return [len(e) for e in encode(texts, add_special_tokens=False)]
        return [self.count(t) for t in texts]

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Character spans of each token of `text`."""
        return encode_with_offsets(self.tokenizer, text)[1]

    def byte_starts(self, text: str, size: int) -> Any | None:
        """Byte offset where each token of `text` starts, from token ids alone: a byte-level
        token is its bytes, so starts are running sums of token lengths (ids from the piece
        cache, no offsets tracked). None unless the lengths add up to the `size` bytes."""
        if self._byte_lengths is None or self.pieces is None:
            return None

        ids = np.array(self.pieces.encode_any(text), dtype=np.int64)
        if ids.size and (ids.max() >= len(self._byte_lengths)):
            return None
        lengths = self._byte_lengths[ids]
        if self.family is not None and self.family.prepend and ids.size:
            lengths[0] -= 1  # the "▁" prepended to the whole text stands for no byte
        if int(lengths.sum()) != size or (lengths[1:] <= 0).any() or (lengths[:1] < 0).any():
            return None
        return np.cumsum(lengths) - lengths

    def starts(self, text: str) -> Any:
        """Character offset where each token of `text` starts (numpy int64)."""
        if self.backend is None:
            return np.array([s for s, _ in self.offsets(text)], dtype=np.int64)
        offsets = self.backend.encode(text, add_special_tokens=False).offsets
        return np.fromiter((s for s, _ in offsets), dtype=np.int64, count=len(offsets))


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
        try:
            text = self.data.decode("utf-8")
        except UnicodeDecodeError:
            return  # costs are counted exactly for non-UTF-8 files
        raw = np.frombuffer(self.data, dtype=np.uint8)
        # a token that starts inside a multi-byte character counts where that character
        # starts in the offsets path and inside it here: the same for ranges on character
        # boundaries, which every piece and chunk is
        self.token_starts = counter.byte_starts(text, len(self.data))
        if self.token_starts is None:
            starts = counter.starts(text)
            char_starts = np.flatnonzero((raw & 0xC0) != 0x80)  # byte offset of each char
            starts = starts[starts < len(char_starts)]
            self.token_starts = char_starts[starts]
        if counter.family is not None and not counter.pieces.has_added(text):
            self.anchors = _anchors(raw, counter.family)

    token_starts = None
    anchors = None  # byte offsets p where data[p-1], data[p] always split (see above)

    def derivable(self, start: int, end: int) -> tuple[int, int] | None:
        """(a, b): the first and last anchor strictly inside (start, end), a < b; None when the
        chunk's count cannot be derived from the file pass."""
        if self.anchors is None:
            return None

        low, high = np.searchsorted(self.anchors, [start + 1, end])
        if high - low < 2:
            return None
        return int(self.anchors[low]), int(self.anchors[high - 1])

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


def _anchors(raw: Any, family: Family) -> Any:
    """Byte offsets p (1 <= p < len) where no pre-token piece can hold both raw[p-1], raw[p]."""
    global _CLASSES
    if _CLASSES is None:
        _CLASSES = byte_classes()
    if family.raw_anchors is not None:
        return np.flatnonzero(family.raw_anchors(raw)) + 1
    classes = _CLASSES[raw]
    left, right = classes[:-1], classes[1:]
    solid = (left != WS) & (left != UNKNOWN) & (right != WS) & (right != UNKNOWN)
    return np.flatnonzero(solid & family.anchors(left, right, raw)) + 1


_CLASSES = None

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
            chosen, cost = "", 0
            for candidate in (SEPARATOR.join((self.path, *scope)), scope[-1]):
                count = self.counter.count(candidate + "\n")
                if count <= limit:
                    chosen, cost = candidate + "\n", count
                    break
            self._header[scope] = chosen
            self._header_cost[scope] = cost  # counted once, here
        return self._header[scope]

    def header_cost(self, scope: tuple[str, ...]) -> int:
        if scope not in self._header_cost:
            self.header(scope)  # sets the cost too (0 for the empty scope: no header)
            self._header_cost.setdefault(scope, 0)
        return self._header_cost[scope]

    def run(self, pieces: list[Piece]) -> list[RawChunk]:
        """Pack, then recount every chunk exactly (batched) and repair the rare overshoot."""
        return self.finalize(self.pack(pieces))

    def _costs(self, pieces: list[Piece]) -> list[int]:
        starts = self.file.token_starts
        if starts is not None:  # tokens starting inside each piece, all pieces at once
            bounds = np.array([(p.start, p.end) for p in pieces], dtype=np.int64)
            found = np.searchsorted(starts, bounds)
            return (found[:, 1] - found[:, 0]).tolist()
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
        counts = self.exact_counts([(c.header, c.start, c.end) for c in pending])
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

    def exact_counts(self, spans: list[tuple[str, int, int]]) -> list[int]:
        """Exact token counts of header + file[start:end] for each span: derived from the
        file's one pass where the tokenizer allows it (only the edges are encoded), else by
        encoding the whole text. Both give the same numbers (tested)."""
        texts: list[str] = []
        continued: list[bool] = []  # the tail of a derived chunk goes on from its middle
        plans: list[tuple[int, int, int]] = []  # (middle tokens, edge texts, first edge index)
        for header, start, end in spans:
            anchors = self.file.derivable(start, end)
            if anchors is None:
                plans.append((0, 1, len(texts)))
                texts.append(header + self.file.text(start, end))
                continued.append(False)
                continue
            a, b = anchors
            low, high = np.searchsorted(self.file.token_starts, [a, b])
            plans.append((int(high - low), 2, len(texts)))
            texts += [header + self.file.text(start, a), self.file.text(b, end)]
            continued += [False, True]
        counts = self.counter.count_many(texts, continued)
        return [middle + sum(counts[i : i + n]) for middle, n, i in plans]

    def _exact(self, group: list[Piece]) -> RawChunk | None:
        scope = group[0].scope
        start, end = group[0].start, group[-1].end
        text = self.file.text(start, end)
        header = self.header(scope)
        count = self.exact_counts([(header, start, end)])[0]
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
