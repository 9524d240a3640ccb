"""Token ids of plain ASCII text from a cache of pre-token pieces (exact, no BPE per byte).

A byte-level BPE tokenizer of a known pre-tokenizer family (families.py: GPT-2's regex, digits
first, Qwen2, Llama 3, DeepSeek-Coder) encodes each piece on its own: the ids of a text are the
ids of its pieces, one after the other. Source code repeats its pieces (names, keywords,
indentation, punctuation runs), so a dictionary from piece to ids answers almost every piece
after the first few files; only new pieces go to the tokenizer. On code this is about three
times faster than the tokenizer's own encode (benchmarks/RESULTS.md, "chunk ... vs one tokenizer
pass").

Where it applies: printable ASCII with tab, line feed and carriage return, and none of the
tokenizer's added tokens in the text. There the pattern's classes (letter, digit, whitespace)
are plain ASCII sets on which every regex engine agrees; anything else (other control
characters, non-ASCII letters and digits, whose classes depend on each engine's Unicode tables)
is answered by the tokenizer itself, line by line: some line feeds start a new piece in any text
(for GPT-2's regex, one after a printable character other than space: only the whitespace
alternatives hold a line feed, and the pattern looks neither behind nor, after a non-space,
ahead; each family says which, `Family.line_breaks`), so a text splits there into lines the
cache answers and lines the tokenizer encodes. tests/chunking/test_pretoken.py compares both
paths on random text.
"""

from __future__ import annotations

import re
from itertools import chain
from operator import attrgetter
from typing import Any

from copilot_cli.chunking.families import GPT2, Family

# The GPT-2 pattern on plain text (the standard `re` runs it about twice as fast as `regex`);
# each family has its own (families.py)
_PATTERN = GPT2.pieces
# bytes outside printable ASCII + \t \n \r: text holding any of them takes the tokenizer
_OUTSIDE = bytes(b for b in range(256) if not (32 <= b < 127 or b in b"\t\n\r"))
_MAX_PIECES = 400_000  # the cache is dropped when it grows past this many pieces
_SHORT = 256  # lines up to this many characters that are not plain are remembered whole
_ID = attrgetter("id")  # a token's id (map over the model's tokens: no generator frame)


class PieceCache:
    """Piece -> token ids, filled on demand from the tokenizer (one process, one tokenizer)."""

    def __init__(self, backend: Any, added_tokens: tuple[str, ...], family: Family = GPT2) -> None:
        self.backend = backend
        self.added_tokens = added_tokens
        # their first two characters, a handful (a vocabulary's 256 reserved "<|...|>" tokens
        # share one): a text holding none of them holds no added token, found in one scan each
        self._added_starts = tuple({token[:2] for token in added_tokens})
        self.family = family
        self._pieces = family.pieces.findall
        self.ids: dict[str, tuple[int, ...]] = {}
        self.others: dict[str, tuple[int, ...]] = {}  # short lines that are not plain
        self._encode = getattr(backend, "encode_batch_fast", None)
        self.model = _model_path(backend, family)

    def clear(self) -> None:
        """Forget every piece and line learned (the next run starts cold, as a new process)."""
        self.ids.clear()
        self.others.clear()

    def applies(self, text: str) -> bool:
        """Whether `text` is in the region where the cached path is exact (see above; for
        SentencePiece every text without an added token)."""
        return (self.family.prepend or _plain(text)) and not self.has_added(text)

    def has_added(self, text: str) -> bool:
        """Whether an added token occurs in `text` (there the tokenizer alone is exact)."""
        if not any(start in text for start in self._added_starts):
            return False
        return any(token in text for token in self.added_tokens)

    def encode_any(self, text: str) -> list[int]:
        """Ids of any text, as the tokenizer gives them: plain lines from the cache, the
        others from the tokenizer."""
        if self.has_added(text):
            return self._tokenizer_ids(text)
        if self.family.prepend or _plain(text):
            return self.encode(text)
        ids: list[int] = []
        for plain, run in _runs(text, self.family.line_breaks):
            ids.extend(self.encode(run) if plain else self._other_ids(run))
        return ids

    def _other_ids(self, run: str) -> tuple[int, ...]:
        """Ids of lines the cache cannot split; short ones remembered (scope headers, with
        their ` · `, recur with every chunk of a scope)."""
        found = self.others.get(run)
        if found is None:
            found = tuple(self._tokenizer_ids(run))
            if len(run) <= _SHORT:
                if len(self.others) >= _MAX_PIECES:
                    self.others.clear()
                self.others[run] = found
        return found

    def count(self, text: str, continued: bool = False) -> int:
        """Number of tokens of any text (no special tokens added). `continued`: the text goes
        on from earlier text (SentencePiece prepends its "▁" to a whole text only)."""
        if not self.applies(text):
            return len(self.encode_any(text))
        pieces = self._pieces(self._prepended(text, continued))
        try:
            return sum(map(len, map(self.ids.__getitem__, pieces)))
        except KeyError:
            return len(self.encode(text, continued))

    def _prepended(self, text: str, continued: bool) -> str:
        """The text the pieces are found in: for SentencePiece with its "▁" in front (unless
        `continued`) and every space already a "▁" (the piece pattern treats both alike, and
        the cache keeps pieces as the BPE model reads them)."""
        if not self.family.prepend:
            return text
        return ("\u2581" + text if text and not continued else text).replace(" ", "\u2581")

    def encode(self, text: str, continued: bool = False) -> list[int]:
        """Ids of `text`, which must satisfy `applies`."""
        pieces = self._pieces(self._prepended(text, continued))
        found = list(map(self.ids.get, pieces))
        if None in found:
            self._fill(pieces)
            found = list(map(self.ids.get, pieces))
            if None in found:  # another thread dropped the cache in between
                return [i for piece in pieces for i in self._piece_ids(piece)]
        return list(chain.from_iterable(found))

    def _tokenizer_ids(self, text: str) -> list[int]:
        if self._encode is not None:  # one text: one thread
            return self._encode([text], add_special_tokens=False)[0].ids
        return self.backend.encode(text, add_special_tokens=False).ids

    def _fill(self, pieces: list[str]) -> None:
        """Ids of the pieces not yet known, each piece on its own (one thread: `--jobs` owns
        the cores): straight from the BPE model where it was checked to agree with the whole
        tokenizer, else through the tokenizer."""
        unique = dict.fromkeys(pieces)
        missing = [p for p in unique if p not in self.ids]
        if not missing:
            return
        if len(self.ids) + len(missing) > _MAX_PIECES:
            self.ids.clear()
            missing = list(unique)
        for piece in missing:
            self.ids[piece] = self._piece_ids(piece)

    def _piece_ids(self, piece: str) -> tuple[int, ...]:
        if self.model is not None:  # SentencePiece pieces already hold "▁" for spaces
            mapped = piece if self.family.prepend else piece.translate(_BYTE_LEVEL)
            return tuple(map(_ID, self.model.tokenize(mapped)))
        if self.family.prepend:  # the tokenizer would prepend its "▁" once more
            raise ValueError("a SentencePiece piece cache needs the BPE model")
        return tuple(self._tokenizer_ids(piece))


# GPT-2's byte-to-character map on plain text: printable ASCII stands for itself, space, tab,
# line feed and carriage return for the characters 256 + their rank among the bytes that do
# not (the map every byte-level BPE vocabulary is written in)
_BYTE_LEVEL = str.maketrans({" ": "\u0120", "\t": "\u0109", "\n": "\u010a", "\r": "\u010d"})
_METASPACE = str.maketrans({" ": "\u2581"})
_PROBE = "".join(map(chr, range(32, 127))) + "\t\n\r  x \n\n\t\tif (a) {\r\n  return b'c'; }\n"


def _model_path(backend: Any, family: Family) -> Any | None:
    """The BPE model, when tokenizing mapped pieces with it gives what the whole tokenizer
    gives on a probe of every plain character (else None: pieces go through the tokenizer)."""
    model = getattr(backend, "model", None)
    if model is None or not hasattr(model, "tokenize"):
        return None
    table, probe = _BYTE_LEVEL, _PROBE
    if family.prepend:  # what a piece of any text may hold: spaces, tabs, non-ASCII, bytes
        table, probe = _METASPACE, _PROBE + "  é\u00a0日本 \x01 \U0001f600x  "
    try:
        direct = [
            t.id
            for p in family.pieces.findall((" " if family.prepend else "") + probe)
            for t in model.tokenize(p.translate(table))
        ]
        whole = backend.encode(probe, add_special_tokens=False).ids
    except Exception:  # any failure: pieces go through the tokenizer
        return None
    return model if direct == list(whole) else None


def _plain(text: str) -> bool:
    if not text.isascii():
        return False
    data = text.encode("ascii")
    return len(data.translate(None, _OUTSIDE)) == len(data)


def _runs(text: str, line_breaks: re.Pattern[str]) -> list[tuple[bool, str]]:
    """`text` cut at the line boundaries above into runs of plain and other lines."""
    runs: list[tuple[bool, list[str]]] = []
    for line in line_breaks.split(text):
        plain = _plain(line)
        if runs and runs[-1][0] == plain:
            runs[-1][1].append(line)
        else:
            runs.append((plain, [line]))
    return [(plain, "".join(lines)) for plain, lines in runs]
