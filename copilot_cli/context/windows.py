"""Similar-code windows: line windows over the other files of the repository, ranked by how
much their identifiers overlap the lines just before the cursor. A small model continues code
that reads like code it has just seen far more readily than it uses a definition, so the
windows most like the code being written (and the lines that follow them, which is what the
next line is likely to look like) are what a request's budget buys first.

The windows come from the chunks themselves (a file's chunks tile it, in byte order), so a
session needs nothing but its chunks file: a file's text is rebuilt once per session."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from copilot_cli.context.index import STOP, ContextIndex

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
    postings: dict[str, np.ndarray]
    idf: dict[str, float]

    def chunks_of(self, file: int, start: int, end: int) -> list[int]:
        """The chunks (index numbers) that lines [start, end) of file `file` come from."""
        starts = self.chunk_starts[file]
        first = max(int(np.searchsorted(starts, start, side="right")) - 1, 0)
        last = max(int(np.searchsorted(starts, end - 1, side="right")) - 1, first)
        return self.chunk_ids[file][first : last + 1]

    def text(self, file: int, start: int, end: int) -> str:
        return "\n".join(self.lines[file][start:end])


def build(index: ContextIndex) -> WindowIndex:
    paths = sorted(index.files)
    lines: list[list[str]] = []
    chunk_starts, chunk_ids = [], []
    file_of, starts, ends, sets = [], [], [], []
    for number, path in enumerate(paths):
        order = index.files[path]
        at, parts = [], []
        line = 0
        for i in order:
            at.append(line)
            parts.append(index.texts[i])
            line += index.texts[i].count("\n")
        text = "".join(parts)
        own = text.split("\n")
        if own and own[-1] == "":
            own.pop()
        lines.append(own)
        chunk_starts.append(np.asarray(at, dtype=np.int64))
        chunk_ids.append(list(order))
        per_line = [frozenset(_IDENT.findall(x)) for x in own]
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
    documents: dict[str, list[int]] = {}
    for w, found in enumerate(sets):
        for name in found:
            documents.setdefault(name, []).append(w)
    n = max(len(sets), 1)
    idf = {
        name: math.log(1 + (n - len(ws) + 0.5) / (len(ws) + 0.5)) for name, ws in documents.items()
    }
    return WindowIndex(
        paths=paths,
        lines=lines,
        chunk_starts=chunk_starts,
        chunk_ids=chunk_ids,
        file_of=np.asarray(file_of, dtype=np.int64),
        start=np.asarray(starts, dtype=np.int64),
        end=np.asarray(ends, dtype=np.int64),
        size=np.asarray([len(x) for x in sets], dtype=np.float64),
        weight=np.asarray([sum(idf[x] for x in found) for found in sets], dtype=np.float64),
        postings={name: np.asarray(ws, dtype=np.int64) for name, ws in documents.items()},
        idf=idf,
    )


def windows_of(index: ContextIndex) -> WindowIndex:
    """The window index of `index` (built on first use, kept with the index)."""
    return index.memo("windows", lambda: build(index))


def query_of(prefix: str, suffix: str = "") -> dict[str, float]:
    """The identifiers of the QUERY_LINES lines before the cursor and, when the editor sends
    what follows it, of the SUFFIX_LINES lines after, each with its weight (1: weighting the
    lines nearest the cursor more measured no better, bench_context_quality)."""
    near = prefix.split("\n")[-QUERY_LINES:] + suffix.split("\n")[:SUFFIX_LINES]
    names = dict.fromkeys(_IDENT.findall("\n".join(near)), 1.0)
    return {x: w for x, w in names.items() if x.lower() not in STOP}


def similarity(windows: WindowIndex, query: dict[str, float]) -> np.ndarray:
    """Each window's idf-weighted Jaccard overlap with the query's identifiers: shared weight
    over the weight of the union (a name every file uses counts little)."""
    n = len(windows.start)
    known = [q for q in query if q in windows.postings]
    if not known or not n:
        return np.zeros(n)
    hits = np.concatenate([windows.postings[q] for q in known])
    sizes = [len(windows.postings[q]) for q in known]
    idf = np.repeat([windows.idf[q] for q in known], sizes)
    boost = np.repeat([query[q] for q in known], sizes)
    shared = np.bincount(hits, weights=idf * boost, minlength=n)
    shared_idf = np.bincount(hits, weights=idf, minlength=n)
    unseen = max(windows.idf.values(), default=1.0)  # a query name no window has: rare
    total = sum(windows.idf.get(q, unseen) * w for q, w in query.items())
    union = total + windows.weight - shared_idf
    return np.divide(shared, union, out=np.zeros(n), where=union > 0)
