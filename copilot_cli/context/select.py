"""Choosing chunks for one request, and packing them into the budget exactly."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from copilot_cli.context.imports import imports_of, resolve
from copilot_cli.context.index import STOP, ContextIndex, terms_of
from copilot_cli.context.options import WEIGHTS, Chosen
from copilot_cli.context.render import render_block, snippet_ids, snippet_text
from copilot_cli.context.windows import (
    FOLLOW,
    POOL,
    WindowIndex,
    score_windows,
    windows_of,
)
from copilot_cli.core.tokens import literal_counts

NEAR_BEFORE, NEAR_AFTER = 30, 10  # lines around the cursor the query is made of
SCAN = 512  # chunks considered for packing, strongest first
MAX_SIGNATURES = 6  # per chunk
SIGNATURE_BLOCK = 64  # chunks whose signature lines are counted in one batch
SMALLEST_LINE = 3  # tokens: less budget left than this holds no signature line
DEFINITION_REST = 0.25  # weight of a chunk's other used definitions after its closest one
AT_CURSOR = 1.0 / (1 + 1 / 8)  # a name's closeness weight on the cursor's line or the one before
# The budget's split, decided per request: similar-code windows first, definition lines after.
SIGNATURES_CALLING = 0.5  # share for definitions when the cursor's lines use outside names
SIGNATURES_SIMILAR = 0.3  # ... when they do not and a window is SIMILAR (code repeated)
SIGNATURES_OTHERWISE = 0.5  # ... when neither holds
SIMILAR = 0.3  # a window's similarity that says another file repeats this code
COPIED = 0.9  # share of a snippet's lines another file's shows (or lists) already: a copy
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_DEFINES = r"(?:def|class|func|function|fn|struct|enum|trait|interface|type|const|let|var)\s+"
_DEFINED = re.compile(r"\b" + _DEFINES + r"([A-Za-z_$][A-Za-z0-9_$]*)")


@dataclass
class Request:
    """The file being edited, split at the cursor."""

    file: str
    prefix: str
    suffix: str
    language: str | None


@dataclass
class Signals:
    definition: np.ndarray
    imports: np.ndarray
    lexical: np.ndarray
    related: np.ndarray  # chunks of files that define names this file uses (anywhere)
    named: dict[int, list[str]] = field(default_factory=dict)  # chunk -> names it defines, used
    imported: dict[int, str] = field(default_factory=dict)  # chunk -> module that brought it
    calling: int = 0  # names at the cursor (its line and the one before) defined elsewhere


def used_names(request: Request) -> dict[str, float]:
    """Identifiers near the cursor, weighted by closeness (the line of the cursor: 1); the
    rest of the file before the cursor counts a little."""
    weights: dict[str, float] = {}
    before = request.prefix.split("\n")
    for distance, line in enumerate(reversed(before)):
        w = 1.0 / (1 + distance / 8) if distance < NEAR_BEFORE else 0.1
        for name in _IDENT.findall(line):
            weights[name] = max(weights.get(name, 0.0), w)
    for distance, line in enumerate(request.suffix.split("\n")[:NEAR_AFTER]):
        for name in _IDENT.findall(line):
            weights[name] = max(weights.get(name, 0.0), 0.5 / (1 + distance / 4))
    return {n: w for n, w in weights.items() if len(n) >= 2 and n.lower() not in STOP}


def signals(index: ContextIndex, request: Request) -> Signals:
    n = len(index.ids)
    definition, imported = np.zeros(n), np.zeros(n)
    found = Signals(definition, imported, np.zeros(n), np.zeros(n))
    whole = request.prefix + request.suffix
    best: dict[int, float] = {}
    files: dict[str, float] = {}
    defined_here = set(_DEFINED.findall(whole))
    for name, weight in used_names(request).items():
        if name in defined_here or name not in index.defs:
            continue  # defined in this file (the prompt has it), or nowhere
        targets = [i for i in index.defs[name] if request.file not in index.paths[i]]
        if not targets:
            continue
        share = weight / len(targets) ** 0.5
        found.calling += weight >= AT_CURSOR
        for i in targets:
            files[index.paths[i][0]] = files.get(index.paths[i][0], 0.0) + share
            best[i] = max(best.get(i, 0.0), share)
            definition[i] += share
            found.named.setdefault(i, []).append(name)
    for i, top in best.items():  # the closest name counts fully, the others a quarter
        definition[i] = top + DEFINITION_REST * (definition[i] - top)
    if request.language == "go":  # a Go package is its folder: every file of it is in scope
        folder = request.file.rpartition("/")[0]
        for path in index.files:
            if path != request.file and path.rpartition("/")[0] == folder:
                chunks = index.file_chunks(path)
                imported[chunks] = np.maximum(imported[chunks], 0.4)
    for path, weight in files.items():  # a file this one depends on: its other definitions
        chunks = index.file_chunks(path)
        found.related[chunks] = np.maximum(found.related[chunks], weight)
    for spec, names in imports_of(whole, request.language):
        for path in resolve(spec, request.language, request.file, index.files):
            if path == request.file:
                continue
            for i in index.files[path]:
                imported[i] = max(imported[i], 0.4)
                found.imported.setdefault(i, path)
            for name in names:
                for i in index.defs.get(name, ()):
                    if path in index.paths[i]:
                        imported[i] = 1.0
    near = "\n".join(request.prefix.split("\n")[-NEAR_BEFORE:])
    near += "\n" + "\n".join(request.suffix.split("\n")[:NEAR_AFTER])
    query: dict[str, float] = {}
    for term in terms_of(near):
        query[term] = query.get(term, 0.0) + 1.0
    found.lexical = index.bm25(query)
    return found


FAMILY = {"typescript": "javascript", "tsx": "javascript", "cpp": "c", "kotlin": "java"}
OTHER_LANGUAGE = 0.25  # a chunk in another language than the file's: its score is scaled so


def language_factor(index: ContextIndex, language: str | None) -> np.ndarray:
    """1 for chunks in the file's language family (or when the file's is unknown), else
    OTHER_LANGUAGE: a Python file's `Frame` is not the TypeScript client's `Frame`."""
    if language is None:
        return np.ones(len(index.ids))
    family = FAMILY.get(language, language)
    return index.memo(
        ("language", family),
        lambda: np.asarray(
            [1.0 if FAMILY.get(x, x) == family else OTHER_LANGUAGE for x in index.languages]
        ),
    )


def strongest(index: ContextIndex, total: np.ndarray, k: int) -> list[int]:
    """The k highest scores, ties broken by chunk id: what sorting every chunk would give,
    without sorting every chunk."""
    if len(total) > k:
        cut = np.partition(total, len(total) - k)[len(total) - k]
        picked = np.nonzero(total >= cut)[0]
    else:
        picked = np.arange(len(total))
    id_rank = index.memo("id_rank", lambda: np.argsort(np.argsort(np.asarray(index.ids))))
    order = picked[np.lexsort((id_rank[picked], -total[picked]))]
    return order[:k].tolist()


def scores(
    index: ContextIndex, found: Signals, language: str | None, weights: dict[str, float]
) -> np.ndarray:
    def scaled(values: np.ndarray) -> np.ndarray:
        top = float(values.max()) if len(values) else 0.0
        return values / top if top > 0 else values

    total = (
        weights["definition"] * scaled(found.definition)
        + weights["import"] * found.imports
        + weights["lexical"] * scaled(found.lexical)
        + weights["related"] * scaled(found.related)
        + weights["rank"] * index.rank
    )
    return total * language_factor(index, language)


def _reason(i: int, index: ContextIndex, found: Signals, parts: dict[str, float]) -> str:
    why = []
    if i in found.named:
        why.append(f"defines {', '.join(sorted(found.named[i])[:4])} (used near the cursor)")
    if i in found.imported:
        why.append(f"in imported {found.imported[i]}")
    if parts["lexical"] > 0:
        why.append(
            f"shares identifiers with the code near the cursor (BM25 {parts['lexical']:.2f})"
        )
    if not why:
        why.append(f"central in the repository (rank percentile {index.rank[i]:.2f})")
    return "; ".join(why)


@dataclass
class Region:
    """Lines [start, end) of file `file` (a window index file number), from merged windows;
    or, when whole chunks are the unit, chunk `chunk` (its lines)."""

    file: int
    start: int
    end: int
    score: float
    chunk: int | None = None
    similar: float = 0.0  # identifier overlap with the lines at the cursor


@dataclass
class Packer:
    """Greedy packing by score; exact: the rendered block is recounted, and while it is over
    the budget the weakest snippet goes."""

    index: ContextIndex
    tokenizer: Any
    budget: int
    fmt: str
    separator: str

    def count(self, text: str) -> int:
        """Tokens of rendered context as a prompt holds it: repository text as data."""
        return len(snippet_ids(self.tokenizer, text, self.fmt, self.separator))

    def header_cost(self, path: str) -> int:
        """Tokens a snippet adds besides its text: its header and footer (memoised per index:
        the tokenizer is the session's)."""
        costs = self.index.memo(("header-costs", self.fmt, self.separator), dict)
        if path not in costs:
            costs[path] = self.count(snippet_text(path, "", self.fmt, self.separator))
        return costs[path]

    def line_costs(self, lines: list[str]) -> dict[str, int]:
        """Tokens of each signature line (with its newline), encoded in one batch when new."""
        costs = self.index.memo("line-costs", dict)
        new = [line for line in lines if line not in costs]
        if new:
            counted = literal_counts(self.tokenizer, [line + "\n" for line in new])
            costs.update(zip(new, counted, strict=True))
        return costs

    def region_cost(self, windows: WindowIndex, region: Region) -> int:
        """Tokens of a region's snippet: its lines (memoised per index) and its header."""
        costs = self.index.memo("region-costs", dict)
        key = (region.file, region.start, region.end, region.chunk)
        if key not in costs:
            text = region_text(self.index, windows, region)
            costs[key] = literal_counts(self.tokenizer, [text.rstrip("\n") + "\n"])[0]
        return costs[key] + self.header_cost(windows.paths[region.file])

    def pack(
        self, windows: WindowIndex, ranked: list[Region], order: list[int], file: str, share: float
    ) -> Packed:
        """Similar-code windows in their ranking (`ranked`), merged where they meet, into the
        budget less `share` of it; then the definition lines of the chunks in the signature
        ranking (`order`), one snippet per file, into the rest (lines a chosen window already
        shows left out); then windows again into what the definitions left; then the exact
        recount."""
        packed = Packed(windows=windows)
        used = self.count(render_block([], self.fmt, self.separator, intro_only=True))
        used = self._add_windows(packed, ranked, used, self.budget * (1 - share))
        rest = [i for i in order[:SCAN] if file not in self.index.paths[i]]
        shown, listed = packed.shown(), set()
        for start in range(0, len(rest), SIGNATURE_BLOCK):
            block = rest[start : start + SIGNATURE_BLOCK]
            self.line_costs([x for i in block for x in self.index.signatures_of(i, MAX_SIGNATURES)])
            for i in block:
                if self.budget - used < SMALLEST_LINE:
                    break
                used = self._add_signatures(packed, i, used, shown, listed)
        self._add_windows(packed, ranked, used, self.budget)
        return self.exact(packed)

    def _add_windows(self, packed: Packed, ranked: list[Region], used: int, limit: float) -> int:
        for window in ranked:
            if used >= limit:
                break
            if window.chunk is not None:  # whole chunks: each its own snippet, never merged
                if any(r.chunk == window.chunk for r in packed.regions):
                    continue
                cost = self.region_cost(packed.windows, window)
                if used + cost <= limit:
                    packed.regions.append(window)
                    used += cost
                continue
            mine = [r for r in packed.regions if r.file == window.file]
            meets = [r for r in mine if r.start <= window.end and window.start <= r.end]
            if meets:
                merged = Region(
                    window.file,
                    min(window.start, *(r.start for r in meets)),
                    max(window.end, *(r.end for r in meets)),
                    max(r.score for r in meets),
                    similar=max(r.similar for r in meets),
                )
                before = sum(self.region_cost(packed.windows, r) for r in meets)
                cost = self.region_cost(packed.windows, merged) - before
                if cost > 0 and used + cost <= limit:
                    at = packed.regions.index(meets[0])
                    packed.regions = [r for r in packed.regions if r not in meets]
                    packed.regions.insert(at, merged)
                    used += cost
                continue
            cost = self.region_cost(packed.windows, window)
            if used + cost <= limit:
                packed.regions.append(window)
                used += cost
        return used

    def _add_signatures(
        self, packed: Packed, i: int, used: int, shown: set[str], listed: set[str]
    ) -> int:
        """Chunk `i`'s definition lines, less those a chosen window shows (`shown`); none when
        most of them are listed (`listed`, which grows) or shown already (a copy of a chunk
        another file has)."""
        path = self.index.paths[i][0]
        signatures = self.index.signatures_of(i, MAX_SIGNATURES)
        there = sum(x in listed or x.strip() in shown for x in signatures)
        if signatures and there >= COPIED * len(signatures):
            return used
        costs = self.line_costs(signatures)
        for line in signatures:
            lines = packed.signatures.get(path, [])
            if line in lines or line.strip() in shown:
                continue
            cost = costs[line] + (0 if lines else self.header_cost(path))
            if used + cost <= self.budget:
                packed.signatures.setdefault(path, []).append(line)
                packed.sources.setdefault(path, []).append(i)
                listed.add(line)
                used += cost
        return used

    def items(self, packed: Packed) -> list[tuple[str, str]]:
        """Prompt order: signature snippets, then windows weakest first (the strongest
        nearest the code)."""
        out = [(path, "\n".join(lines)) for path, lines in packed.signatures.items()]
        windows = packed.windows
        out += [
            (windows.paths[r.file], region_text(self.index, windows, r))
            for r in reversed(packed.regions)
        ]
        return out

    def exact(self, packed: Packed) -> Packed:
        while True:
            packed.text = render_block(self.items(packed), self.fmt, self.separator)
            packed.tokens = self.count(packed.text)
            if packed.tokens <= self.budget or packed.empty:
                return packed
            packed.drop_weakest()


@dataclass
class Packed:
    windows: WindowIndex
    regions: list[Region] = field(default_factory=list)  # strongest first
    signatures: dict[str, list[str]] = field(default_factory=dict)  # path -> lines, in order
    sources: dict[str, list[int]] = field(default_factory=dict)  # path -> chunks, per line
    text: str = ""
    tokens: int = 0

    @property
    def empty(self) -> bool:
        return not self.regions and not self.signatures

    def shown(self) -> set[str]:
        """The lines (stripped) of the chosen windows: a definition line one of them shows is
        there already, whichever file it is in."""
        lines = self.windows.lines
        return {x.strip() for r in self.regions for x in lines[r.file][r.start : r.end]}

    def drop_weakest(self) -> None:
        """The last signature line added goes first, then the weakest window."""
        if self.signatures:
            path = next(reversed(self.signatures))
            self.signatures[path].pop()
            self.sources[path].pop()
            if not self.signatures[path]:
                del self.signatures[path], self.sources[path]
        else:
            self.regions.pop()


def region_text(index: ContextIndex, windows: WindowIndex, region: Region) -> str:
    """A region's snippet text: a whole chunk's own text, or the window's lines."""
    if region.chunk is not None:
        return index.texts[region.chunk]
    return windows.text(region.file, region.start, region.end)


def as_chunks(index: ContextIndex, windows: WindowIndex, ranked: list[Region]) -> list[Region]:
    """Each window as the whole chunks its lines come from, in order, each chunk once: the
    unit stored chunk KV can serve (a window's lines are rarely one chunk's text)."""
    out, seen = [], set()
    for region in ranked:
        starts = windows.chunk_starts[region.file]
        chunks = windows.chunk_ids[region.file]
        for k in range(len(chunks)):
            i = chunks[k]
            first = int(starts[k])
            last = int(starts[k + 1]) if k + 1 < len(chunks) else len(windows.lines[region.file])
            if first < region.end and region.start < last and i not in seen:
                seen.add(i)
                out.append(Region(region.file, first, last, region.score, i, region.similar))
    return out


def ranked_windows(index: ContextIndex, request: Request) -> list[Region]:
    """The POOL windows most like the lines before the cursor, best first, each with the
    FOLLOW lines after it; none of the current file (nor of a chunk it shares)."""
    windows = windows_of(index)
    score, overlap = score_windows(windows, request.prefix, request.suffix)
    if request.language is not None:
        family = FAMILY.get(request.language, request.language)
        factor = index.memo(
            ("window-language", family),
            lambda: np.asarray(
                [
                    1.0 if FAMILY.get(x, x) == family else OTHER_LANGUAGE
                    for x in (index.language_of.get(p) for p in windows.paths)
                ]
            )[windows.file_of],
        )
        score = score * factor
    out: list[Region] = []
    copies = _Copies()
    for w in _best_first(score, POOL * 4):
        if score[w] <= 0 or len(out) >= POOL:
            break
        f = int(windows.file_of[w])
        start, end = int(windows.start[w]), int(windows.end[w])
        if windows.paths[f] == request.file or any(
            request.file in index.paths[i] for i in windows.chunks_of(f, start, end)
        ):
            continue
        end = min(end + FOLLOW, len(windows.lines[f]))
        if copies.repeats(f, windows.lines[f][start:end]):
            continue  # another file's better window already shows these lines
        out.append(Region(f, start, end, float(score[w]), similar=float(overlap[w])))
    return out


class _Copies:
    """The lines of the windows kept so far, to leave out a window of another file that
    repeats one of them nearly line for line (a copied or vendored file, an old version kept
    beside the new). Lines are compared stripped, blank ones aside; the lines a window shows
    after its own count too, so two files that share only a licence header are not copies."""

    def __init__(self) -> None:
        self.owners: dict[str, list[int]] = {}  # line -> the kept windows showing it
        self.kept: list[tuple[int, set[str]]] = []  # (file, its lines) per kept window

    def repeats(self, file: int, lines: list[str]) -> bool:
        mine = [x for x in (line.strip() for line in lines) if x]
        distinct = set(mine)
        if mine:
            # a copy lacks at most `slack` of these lines, so it shows one of the slack + 1
            # rarest: only the windows showing those are counted (common lines have many)
            slack = len(mine) - math.ceil(COPIED * len(mine))
            rare = sorted(distinct, key=lambda x: (len(self.owners.get(x, ())), x))[: slack + 1]
            for w in sorted({w for x in rare for w in self.owners.get(x, ())}):
                owner, theirs = self.kept[w]
                if owner != file and sum(x in theirs for x in mine) >= COPIED * len(mine):
                    return True
        for line in distinct:
            self.owners.setdefault(line, []).append(len(self.kept))
        self.kept.append((file, distinct))
        return False


def _best_first(score: np.ndarray, k: int) -> list[int]:
    """The k highest scores, best first, ties by number (sorting all, without sorting all)."""
    if len(score) > k:
        cut = np.partition(score, len(score) - k)[len(score) - k]
        picked = np.nonzero(score >= cut)[0]
    else:
        picked = np.arange(len(score))
    return picked[np.lexsort((picked, -score[picked]))].tolist()


def split(found: Signals, ranked: list[Region]) -> float:
    """The share of the budget definition lines may take, from what the cursor needs: a use
    of an outside name at the cursor wants its definition; code that another file repeats
    wants that file's lines; neither, the definitions of what the code near it uses."""
    if found.calling:
        return SIGNATURES_CALLING
    if max((r.similar for r in ranked[:8]), default=0.0) >= SIMILAR:
        return SIGNATURES_SIMILAR
    return SIGNATURES_OTHERWISE


def choose(
    index: ContextIndex,
    request: Request,
    tokenizer: Any,
    budget: int,
    fmt: str,
    separator: str,
    unit: str = "lines",
) -> tuple[list[Chosen], str, int, int]:
    """The chosen snippets (prompt order), the block, its tokens, and how many chunks had any
    signal. `unit`: "lines" (windows of lines) or "chunks" (each window as whole chunks)."""
    found = signals(index, request)
    total = scores(index, found, request.language, WEIGHTS)
    order = strongest(index, total, SCAN)
    ranked = ranked_windows(index, request)
    if unit == "chunks":
        ranked = as_chunks(index, windows_of(index), ranked)
    share = split(found, ranked)
    candidates = int(np.count_nonzero((found.definition + found.imports + found.lexical) > 0))
    packer = Packer(index, tokenizer, budget, fmt, separator)
    packed = packer.pack(windows_of(index), ranked, order, request.file, share)
    out = [
        _signatures_chosen(index, found, total, path, lines, packed.sources[path], packer)
        for path, lines in packed.signatures.items()
    ]
    out += [
        _window_chosen(index, found, total, r, packer, packed.windows)
        for r in reversed(packed.regions)
    ]
    return out, packed.text, packed.tokens, candidates


def _window_chosen(
    index: ContextIndex,
    found: Signals,
    total: np.ndarray,
    region: Region,
    packer: Packer,
    windows: WindowIndex,
) -> Chosen:
    if region.chunk is not None:
        chunks = [region.chunk]
    else:
        chunks = windows.chunks_of(region.file, region.start, region.end)
    best = max(chunks, key=lambda i: (total[i], -i))
    text = region_text(index, windows, region)
    parts = {**_parts(index, found, best), "similarity": round(region.similar, 6)}
    why = f"reads like the code before the cursor (identifier overlap {region.similar:.2f})"
    if best in found.named or best in found.imported:
        why += "; " + _reason(best, index, found, {"lexical": 0.0})
    return Chosen(
        id=index.ids[best],
        path=windows.paths[region.file],
        start_line=region.start + 1,
        end_line=region.end,
        tokens=packer.count(text),
        score=round(region.score, 6),
        signals=parts,
        reason=why,
        text=text,
        kind="window" if region.chunk is None else "chunk",
        chunks=sorted(dict.fromkeys(index.ids[i] for i in chunks)),
    )


def _parts(index: ContextIndex, found: Signals, i: int) -> dict[str, float]:
    return {
        "definition": round(float(found.definition[i]), 6),
        "import": round(float(found.imports[i]), 6),
        "lexical": round(float(found.lexical[i]), 6),
        "rank": round(float(index.rank[i]), 6),
    }


def _signatures_chosen(
    index: ContextIndex,
    found: Signals,
    total: np.ndarray,
    path: str,
    lines: list[str],
    sources: list[int],
    packer: Packer,
) -> Chosen:
    best = max(sources, key=lambda i: total[i])
    text = "\n".join(lines)
    return Chosen(
        id=index.ids[best],
        path=path,
        start_line=min(index.lines[i][0] for i in sources),
        end_line=max(index.lines[i][1] for i in sources),
        tokens=packer.count(text),
        score=round(float(total[best]), 6),
        signals=_parts(index, found, best),
        reason="signatures only (the budget's rest): "
        + _reason(best, index, found, {"lexical": float(found.lexical[best])}),
        text=text,
        kind="signatures",
        chunks=sorted(dict.fromkeys(index.ids[i] for i in sources)),
    )
