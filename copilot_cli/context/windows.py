"""Similar-code windows: line windows over the other files of the repository, ranked by how
much their identifiers overlap the lines just before the cursor. A small model continues code
that reads like code it has just seen far more readily than it uses a definition, so the
windows most like the code being written (and the lines that follow them, which is what the
next line is likely to look like) are what a request's budget buys first.

The windows come from the chunks themselves (a file's chunks tile it, in byte order), so a
session needs nothing but its chunks file: a file's text is rebuilt once per session."""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import re
import zipfile
from collections import Counter
from dataclasses import dataclass

import numpy as np

from copilot_cli.context.index import STOP, ContextIndex, terms_of
from copilot_cli.core.artifacts import write_bytes
from copilot_cli.core.fingerprints import cache_dir

WINDOWS_VERSION = 1  # of the cached window index (its arrays)
WINDOW_LINES = 20  # lines a window is scored on
STRIDE = 10  # lines between window starts
FOLLOW = 6  # lines shown after a window: what came next in code like this
QUERY_LINES = 20  # lines before the cursor the windows are compared with
SUFFIX_LINES = 10  # ... and lines after it, when the request has them
POOL = 64  # windows considered for packing, best first
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")


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

    def bm25(self, query: set[str], k1: float = 1.2, b: float = 0.75) -> np.ndarray:
        n = len(self.start)
        rows = sorted(self.term_at[t] for t in query if t in self.term_at)
        if not rows or not n:
            return np.zeros(n)
        norm = self._norm(k1, b)
        idx = np.concatenate(
            [self.term_windows[self.term_ptr[r] : self.term_ptr[r + 1]] for r in rows]
        )
        tf = np.concatenate(
            [self.term_counts[self.term_ptr[r] : self.term_ptr[r + 1]] for r in rows]
        )
        sizes = np.diff(self.term_ptr)[rows]
        idf = np.asarray([math.log(1 + (n - int(m) + 0.5) / (int(m) + 0.5)) for m in sizes])
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


def build(files: Layout) -> dict[str, np.ndarray]:
    """The windows of every file and their postings, as flat arrays (what the cache holds)."""
    file_of, starts, ends, sets = [], [], [], []
    term_rows: dict[str, tuple[list[int], list[int]]] = {}
    lengths: list[int] = []
    for number, own in enumerate(files.lines):
        per_line = [frozenset(_IDENT.findall(x)) for x in own]
        line_terms = [terms_of(x) for x in own]
        for start in range(0, max(len(own) - (WINDOW_LINES - STRIDE), 1), STRIDE):
            end = min(start + WINDOW_LINES, len(own))
            found: set[str] = set()
            found.update(*per_line[start:end])
            found = {x for x in found if x.lower() not in STOP}
            if not found:
                continue
            file_of.append(number)
            starts.append(start)
            ends.append(end)
            sets.append(found)
            counted = Counter(t for terms in line_terms[start:end] for t in terms)
            lengths.append(sum(counted.values()))
            for term, count in counted.items():
                term_rows.setdefault(term, ([], []))
                term_rows[term][0].append(len(sets) - 1)
                term_rows[term][1].append(count)
    documents: dict[str, list[int]] = {}
    for w, found in enumerate(sets):
        for name in sorted(found):
            documents.setdefault(name, []).append(w)
    n = max(len(sets), 1)
    names = sorted(documents)
    idf = [math.log(1 + (n - len(documents[x]) + 0.5) / (len(documents[x]) + 0.5)) for x in names]
    at = dict(zip(names, idf, strict=True))
    terms = sorted(term_rows)
    return {
        "file_of": np.asarray(file_of, dtype=np.int64),
        "start": np.asarray(starts, dtype=np.int64),
        "end": np.asarray(ends, dtype=np.int64),
        "size": np.asarray([len(x) for x in sets], dtype=np.float64),
        "weight": np.asarray(
            [sum(at[x] for x in sorted(found)) for found in sets], dtype=np.float64
        ),
        "length": np.asarray(lengths, dtype=np.float64),
        "names": _strings(names),
        "name_ptr": _offsets([len(documents[x]) for x in names]),
        "name_windows": np.asarray([w for x in names for w in documents[x]], dtype=np.int64),
        "name_idf": np.asarray(idf, dtype=np.float64),
        "terms": _strings(terms),
        "term_ptr": _offsets([len(term_rows[t][0]) for t in terms]),
        "term_windows": np.asarray([w for t in terms for w in term_rows[t][0]], dtype=np.int64),
        "term_counts": np.asarray([c for t in terms for c in term_rows[t][1]], dtype=np.float64),
    }


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
    data = None
    try:
        raw = path.read_bytes()
        digest, _, body = raw.partition(b"\n")
        if digest.decode() == hashlib.sha256(body).hexdigest():
            with np.load(io.BytesIO(body), allow_pickle=False) as loaded:
                data = {k: loaded[k] for k in loaded.files}
            if set(data) != _KEYS or not _sound(files, data):
                data = None
    except (OSError, ValueError, UnicodeDecodeError, KeyError, zipfile.BadZipFile):
        data = None
    if data is None:
        data = build(files)
        buffer = io.BytesIO()
        np.savez(buffer, **data)
        body = buffer.getvalue()
        with contextlib.suppress(OSError):  # a read-only cache: built again next time
            write_bytes(path, hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    return assemble(files, data)


_KEYS = {
    "file_of", "start", "end", "size", "weight", "length", "names", "name_ptr", "name_windows",
    "name_idf", "terms", "term_ptr", "term_windows", "term_counts",
}  # fmt: skip


def windows_of(index: ContextIndex) -> WindowIndex:
    """The window index of `index` (built on first use, kept with the index)."""
    return index.memo("windows", lambda: cached(index))


def query_of(prefix: str, suffix: str = "") -> dict[str, float]:
    """The identifiers of the QUERY_LINES lines before the cursor and, when the editor sends
    what follows it, of the SUFFIX_LINES lines after, each with its weight (1: weighting the
    lines nearest the cursor more measured no better, bench_context_quality)."""
    near = prefix.split("\n")[-QUERY_LINES:] + suffix.split("\n")[:SUFFIX_LINES]
    names = dict.fromkeys(_IDENT.findall("\n".join(near)), 1.0)
    return {x: w for x, w in names.items() if x.lower() not in STOP}


def score_windows(windows: WindowIndex, prefix: str, suffix: str) -> tuple[np.ndarray, np.ndarray]:
    """Each window's BM25 against the terms of the lines at the cursor (what ranks them), and
    its identifier overlap with them (how alike they read: what the budget's split and the
    reasons use)."""
    near = prefix.split("\n")[-QUERY_LINES:] + suffix.split("\n")[:SUFFIX_LINES]
    bm25 = windows.bm25(set(terms_of("\n".join(near))))
    return bm25, similarity(windows, query_of(prefix, suffix))


def similarity(windows: WindowIndex, query: dict[str, float]) -> np.ndarray:
    """Each window's idf-weighted Jaccard overlap with the query's identifiers: shared weight
    over the weight of the union (a name every file uses counts little)."""
    n = len(windows.start)
    known = [q for q in query if q in windows.name_at]
    if not known or not n:
        return np.zeros(n)
    rows = [windows.name_at[q] for q in known]
    ptr = windows.name_ptr
    hits = np.concatenate([windows.name_windows[ptr[r] : ptr[r + 1]] for r in rows])
    sizes = np.diff(ptr)[rows]
    idf = np.repeat(windows.name_idf[rows], sizes)
    boost = np.repeat([query[q] for q in known], sizes)
    shared = np.bincount(hits, weights=idf * boost, minlength=n)
    shared_idf = np.bincount(hits, weights=idf, minlength=n)
    unseen = float(windows.name_idf.max()) if len(windows.name_idf) else 1.0  # a new name: rare
    at = windows.name_at
    total = sum(
        (float(windows.name_idf[at[q]]) if q in at else unseen) * w for q, w in query.items()
    )
    union = total + windows.weight - shared_idf
    return np.divide(shared, union, out=np.zeros(n), where=union > 0)
