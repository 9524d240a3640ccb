"""Similar-code windows: line windows over the other files of the repository, ranked by how
much their identifiers overlap the lines just before the cursor. A small model continues code
that reads like code it has just seen far more readily than it uses a definition, so the
windows most like the code being written (and the lines that follow them, which is what the
next line is likely to look like) are what a request's budget buys first.

The windows come from the chunks themselves (a file's chunks tile it, in byte order), so a
session needs nothing but its chunks file: a file's text is rebuilt once per session."""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from copilot_cli.context.index import STOP, ContextIndex, terms_of, terms_of_name
from copilot_cli.core.cached_arrays import read_arrays, write_arrays
from copilot_cli.core.fingerprints import cache_dir
from copilot_cli.core.heap import paused_gc

WINDOWS_VERSION = 1  # of the cached window index (its arrays)
WINDOW_LINES = 20  # lines a window is scored on
STRIDE = 10  # lines between window starts
FOLLOW = 6  # lines shown after a window: what came next in code like this
QUERY_LINES = 20  # lines before the cursor the windows are compared with
SUFFIX_LINES = 10  # ... and lines after it, when the request has them
NEAR_LINES = 2  # the last lines before the cursor (the one before its line, and that line's
# start): their terms count twice, as the next line reads most like the one just written
POOL = 64  # windows considered for packing, best first
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_IDENT_OR_END = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*|\n")  # an identifier, or a line's end


@dataclass
class WindowIndex:
    """Every file's lines and its windows' identifier sets, as postings for fast overlap."""

    paths: list[str]
    lines: list[list[str]]  # per file number, its lines
    chunk_starts: list[np.ndarray]  # per file, the first line (0-based) of each chunk there
    chunk_ids: list[list[int]]  # per file, those chunks (index numbers)
    file_of: np.ndarray  # window -> file number
    start: np.ndarray  # window -> first line (0-based)
    end: np.ndarray  # window -> one past its last scored line
    size: np.ndarray  # window -> distinct identifiers
    weight: np.ndarray  # window -> sum of its identifiers' idf
    name_at: dict[str, int]  # identifier -> its row in the name postings
    name_ptr: np.ndarray
    name_windows: np.ndarray
    name_idf: np.ndarray
    term_at: dict[str, int]  # term -> its row in the term postings (BM25)
    term_ptr: np.ndarray
    term_windows: np.ndarray
    term_counts: np.ndarray
    length: np.ndarray  # window -> terms

    def bm25(self, query: dict[str, float], k1: float = 1.2, b: float = 0.75) -> np.ndarray:
        """Each window's BM25 against the query's terms, each term's part times its weight."""
        n = len(self.start)
        found = sorted((self.term_at[t], w) for t, w in query.items() if t in self.term_at)
        if not found or not n:
            return np.zeros(n)
        rows = [r for r, _w in found]
        norm = self._norm(k1, b)
        idx = np.concatenate(
            [self.term_windows[self.term_ptr[r] : self.term_ptr[r + 1]] for r in rows]
        )
        tf = np.concatenate(
            [self.term_counts[self.term_ptr[r] : self.term_ptr[r + 1]] for r in rows]
        )
        sizes = np.diff(self.term_ptr)[rows]
        idf = np.asarray(
            [
                w * math.log(1 + (n - int(m) + 0.5) / (int(m) + 0.5))
                for (_r, w), m in zip(found, sizes, strict=True)
            ]
        )
        weights = np.repeat(idf, sizes) * tf * (k1 + 1) / (tf + norm[idx])
        return np.bincount(idx, weights=weights, minlength=n)

    def _norm(self, k1: float, b: float) -> np.ndarray:
        key = (k1, b)
        if getattr(self, "_norm_key", None) != key:
            average = max(float(self.length.mean()), 1e-9) if len(self.length) else 1.0
            self._norm_values = k1 * (1 - b + b * self.length / average)
            self._norm_key = key
        return self._norm_values

    def chunks_of(self, file: int, start: int, end: int) -> list[int]:
        """The chunks (index numbers) that lines [start, end) of file `file` come from."""
        starts = self.chunk_starts[file]
        first = max(int(np.searchsorted(starts, start, side="right")) - 1, 0)
        last = max(int(np.searchsorted(starts, end - 1, side="right")) - 1, first)
        return self.chunk_ids[file][first : last + 1]

    def text(self, file: int, start: int, end: int) -> str:
        return "\n".join(self.lines[file][start:end])


@dataclass
class Layout:
    """Every file's lines, rebuilt from its chunks, and where each chunk starts in them."""

    paths: list[str]
    lines: list[list[str]]
    chunk_starts: list[np.ndarray]
    chunk_ids: list[list[int]]


def layout(index: ContextIndex) -> Layout:
    out = Layout(sorted(index.files), [], [], [])
    for path in out.paths:
        order = index.files[path]
        at, line = [], 0
        for i in order:
            at.append(line)
            line += index.texts[i].count("\n")
        own = "".join(index.texts[i] for i in order).split("\n")
        if own and own[-1] == "":
            own.pop()
        out.lines.append(own)
        out.chunk_starts.append(np.asarray(at, dtype=np.int64))
        out.chunk_ids.append(list(order))
    return out


def _identifiers(files: Layout) -> tuple[list[str], np.ndarray, np.ndarray, list[int]]:
    """Every identifier of every line, as numbers (names in first-seen order), with where
    each line's start in that array and each file's first line. One findall per file (a line's
    end is a token too, numbered -1), names numbered as they come by a counting dict: no Python
    loop per token."""
    vocab: defaultdict[str, int] = defaultdict(itertools.count().__next__)
    vocab["\n"] = -1
    tokens: list[int] = []
    first_line, lines = [], 0
    for own in files.lines:
        first_line.append(lines)
        lines += len(own)
        if own:
            tokens.extend(map(vocab.__getitem__, _IDENT_OR_END.findall("\n".join(own) + "\n")))
    flat = np.fromiter(tokens, dtype=np.int64, count=len(tokens))
    ends = np.flatnonzero(flat < 0)  # one per line, in order
    line_ptr = np.concatenate([[0], ends - np.arange(len(ends))]).astype(np.int64)
    names = [name for name in vocab if name != "\n"]  # first-seen order: their numbers
    return names, flat[flat >= 0], line_ptr, first_line


def _name_terms(by_rank: list[str]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Each name's BM25 terms (terms_of) as term ranks (string order), flat, with how many
    each name has, and the terms in that order (no Python loop body per name or term)."""
    rows = list(map(terms_of_name, by_rank))  # each is one identifier: terms_of's terms
    terms = list(itertools.chain.from_iterable(rows))
    term_sorted = sorted(set(terms))
    rank_of = dict(zip(term_sorted, itertools.count()))
    flat = np.fromiter(map(rank_of.__getitem__, terms), dtype=np.int64, count=len(terms))
    counts = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    return flat, counts, term_sorted


def _window_tokens(
    files: Layout, ptr: np.ndarray, first_line: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every candidate window as (file, start, end, first token, one past its last), and the
    token positions of all of them with the window each belongs to (a window's tokens are
    one slice of the repository's)."""
    spans = []
    for number, own in enumerate(files.lines):
        g = first_line[number]
        for start in range(0, max(len(own) - (WINDOW_LINES - STRIDE), 1), STRIDE):
            end = min(start + WINDOW_LINES, len(own))
            spans.append((number, start, end, int(ptr[g + start]), int(ptr[g + end])))
    table = np.asarray(spans, dtype=np.int64).reshape(-1, 5)
    lengths = table[:, 4] - table[:, 3]
    offsets = np.cumsum(lengths) - lengths
    where = np.repeat(table[:, 3] - offsets, lengths) + np.arange(int(lengths.sum()))
    return table, where, np.repeat(np.arange(len(table)), lengths)


def build(files: Layout) -> dict[str, np.ndarray]:
    """The windows of every file and their postings, as flat arrays (what the cache holds):
    identifiers read once per line, the rest done on arrays (a window's tokens are one slice
    of the repository's)."""
    names, toks, ptr, first_line = _identifiers(files)
    rank = np.empty(len(names), dtype=np.int64)  # a name's place in string order
    rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
    by_rank = sorted(names)
    kept = np.asarray([x.lower() not in STOP for x in by_rank], dtype=bool)
    table, where, owner = _window_tokens(files, ptr, first_line)
    ranks = rank[toks[where]]
    keep = kept[ranks]
    pairs = _distinct(owner[keep] * len(by_rank) + ranks[keep])  # distinct (window, name)
    pair_window, pair_name = pairs // max(len(by_rank), 1), pairs % max(len(by_rank), 1)
    size = np.bincount(pair_window, minlength=len(table))
    alive = size > 0  # a window of keywords alone is no window
    renumber = np.cumsum(alive) - 1
    pair_window = renumber[pair_window]
    n = int(alive.sum())
    df = np.bincount(pair_name, minlength=len(by_rank))
    present = np.nonzero(df)[0]
    idf_of = np.zeros(len(by_rank))
    idf_of[present] = [
        math.log(1 + (max(n, 1) - int(d) + 0.5) / (int(d) + 0.5)) for d in df[present]
    ]
    weight = np.bincount(pair_window, weights=idf_of[pair_name], minlength=n)
    by_name = np.lexsort((pair_window, pair_name))
    flat, counts, term_sorted = _name_terms(by_rank)
    starts = np.cumsum(counts) - counts
    live = alive[owner]
    per = counts[ranks[live]]
    at = np.repeat(starts[ranks[live]] - (np.cumsum(per) - per), per) + np.arange(int(per.sum()))
    term_tokens = flat[at]
    term_window = np.repeat(renumber[owner[live]], per)
    width = max(len(term_sorted), 1)
    keys, tf = np.unique(term_tokens * n + term_window, return_counts=True) if n else ([], [])
    keys = np.asarray(keys, dtype=np.int64)
    term_df = np.bincount(keys // max(n, 1), minlength=width) if n else np.zeros(width, int)
    present_terms = np.nonzero(term_df)[0]
    return {
        "file_of": table[alive, 0],
        "start": table[alive, 1],
        "end": table[alive, 2],
        "size": size[alive].astype(np.float64),
        "weight": weight,
        "length": np.bincount(term_window, minlength=n).astype(np.float64),
        "names": _strings([by_rank[k] for k in present]),
        "name_ptr": _offsets(df[present].tolist()),
        "name_windows": pair_window[by_name].astype(np.int64),
        "name_idf": idf_of[present],
        "terms": _strings([term_sorted[k] for k in present_terms]),
        "term_ptr": _offsets(term_df[present_terms].tolist()),
        "term_windows": keys % max(n, 1),
        "term_counts": np.asarray(tf, dtype=np.float64),
    }


def _distinct(values: np.ndarray) -> np.ndarray:
    """np.unique(values), by sorting: numpy 2's hashing path took 2.3 s of the standard
    library's 4.6 s window build for what a sort does in 0.1 s (the same sorted values)."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def _strings(values: list[str]) -> np.ndarray:
    return np.frombuffer("\n".join(values).encode("utf-8"), dtype=np.uint8)


def _offsets(sizes: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)


def assemble(files: Layout, data: dict[str, np.ndarray]) -> WindowIndex:
    """A WindowIndex from the layout and the flat arrays (built, or read from the cache)."""
    return WindowIndex(
        paths=files.paths,
        lines=files.lines,
        chunk_starts=files.chunk_starts,
        chunk_ids=files.chunk_ids,
        file_of=data["file_of"],
        start=data["start"],
        end=data["end"],
        size=data["size"],
        weight=data["weight"],
        name_at={x: k for k, x in enumerate(_names(data["names"]))},
        name_ptr=data["name_ptr"],
        name_windows=data["name_windows"],
        name_idf=data["name_idf"],
        term_at={x: k for k, x in enumerate(_names(data["terms"]))},
        term_ptr=data["term_ptr"],
        term_windows=data["term_windows"],
        term_counts=data["term_counts"],
        length=data["length"],
    )


def _names(raw: np.ndarray) -> list[str]:
    text = raw.tobytes().decode("utf-8")
    return text.split("\n") if text else []


def _sound(files: Layout, data: dict[str, np.ndarray]) -> bool:
    """A cached entry fits this layout: every array the right shape, every number in range."""
    n = len(data["start"])
    names, terms = _names(data["names"]), _names(data["terms"])
    if any(len(data[k]) != n for k in ("file_of", "end", "size", "weight", "length")):
        return False
    if len(data["name_ptr"]) != len(names) + 1 or len(data["term_ptr"]) != len(terms) + 1:
        return False
    if len(data["name_idf"]) != len(names) or len(data["term_counts"]) != len(data["term_windows"]):
        return False
    if data["name_ptr"][-1] != len(data["name_windows"]) or data["term_ptr"][-1] != len(
        data["term_windows"]
    ):
        return False
    if np.any(np.diff(data["name_ptr"]) < 0) or np.any(np.diff(data["term_ptr"]) < 0):
        return False
    for key in ("name_windows", "term_windows"):
        if len(data[key]) and (data[key].min() < 0 or data[key].max() >= n):
            return False
    if n and (data["file_of"].min() < 0 or data["file_of"].max() >= len(files.lines)):
        return False
    sizes = np.asarray([len(x) for x in files.lines], dtype=np.int64)
    return bool(
        n == 0
        or (
            (data["start"] >= 0).all()
            and (data["start"] < data["end"]).all()
            and (data["end"] <= sizes[data["file_of"]]).all()
        )
    )


def cached(index: ContextIndex) -> WindowIndex:
    """The window index, read from the cache folder when an entry for these chunks (and these
    window settings) is there and sound, else built and cached (sha256 line first, as the
    context index is: a damaged entry is rebuilt)."""
    files = layout(index)
    name = f"{index.key}.windows-{WINDOWS_VERSION}-{WINDOW_LINES}-{STRIDE}.npz"
    path = cache_dir() / "context" / name
    data = read_arrays(path)
    if data is not None and (set(data) != _KEYS or not _sound(files, data)):
        data = None
    if data is None:
        with paused_gc():
            data = build(files)
        write_arrays(path, data)
    return assemble(files, data)


_KEYS = {
    "file_of", "start", "end", "size", "weight", "length", "names", "name_ptr", "name_windows",
    "name_idf", "terms", "term_ptr", "term_windows", "term_counts",
}  # fmt: skip


def windows_of(index: ContextIndex) -> WindowIndex:
    """The window index of `index` (built on first use, kept with the index)."""
    return index.memo("windows", lambda: cached(index))


def score_windows(windows: WindowIndex, prefix: str, suffix: str) -> tuple[np.ndarray, np.ndarray]:
    """Each window's BM25 against the terms of the lines at the cursor (the QUERY_LINES before
    it and, when the editor sends what follows, the SUFFIX_LINES after; a term of the last
    NEAR_LINES counts twice): what ranks them; and its identifier overlap with them (how alike
    they read: what the budget's split and the reasons use)."""
    before = prefix.split("\n")
    near = "\n".join(before[-QUERY_LINES:] + suffix.split("\n")[:SUFFIX_LINES])
    names = [x for x in dict.fromkeys(_IDENT.findall(near)) if x.lower() not in STOP]
    query = dict.fromkeys(terms_of(near), 1.0)
    for term in terms_of("\n".join(before[-NEAR_LINES:])):
        query[term] = 2.0
    return windows.bm25(query), similarity(windows, names)


def similarity(windows: WindowIndex, query: list[str]) -> np.ndarray:
    """Each window's idf-weighted Jaccard overlap with the query's identifiers: shared weight
    over the weight of the union (a name every file uses counts little)."""
    n = len(windows.start)
    at = windows.name_at
    rows = [at[q] for q in query if q in at]
    if not rows or not n:
        return np.zeros(n)
    ptr = windows.name_ptr
    hits = np.concatenate([windows.name_windows[ptr[r] : ptr[r + 1]] for r in rows])
    idf = np.repeat(windows.name_idf[rows], np.diff(ptr)[rows])
    shared = np.bincount(hits, weights=idf, minlength=n)
    unseen = float(windows.name_idf.max()) if len(windows.name_idf) else 1.0  # a new name: rare
    total = sum(float(windows.name_idf[at[q]]) if q in at else unseen for q in query)
    union = total + windows.weight - shared
    return np.divide(shared, union, out=np.zeros(n), where=union > 0)
