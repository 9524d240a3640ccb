"""The context index of one chunks file + registry: who defines which name, which chunks each
file holds, identifier postings for BM25, ranks. Built once and cached under the cache folder
(`context/`), keyed by the chunks file's and the registry's digests and the index version: a
re-chunked repository gets a new index, a damaged cache entry is rebuilt."""

from __future__ import annotations

import contextlib
import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from copilot_cli.chunking import Chunk, ChunksHeader, Registry
from copilot_cli.context.signatures import signature_line
from copilot_cli.core.artifacts import write_bytes
from copilot_cli.core.fingerprints import cache_dir

INDEX_VERSION = 3
# Definitions tree-sitter's entities miss in JavaScript/TypeScript: `exports.f = function`,
# `obj.f = function`, `X.prototype.f = function`, `const f = (...) =>` / `= function`.
_JS_DEFINES = re.compile(
    r"^[ \t]*(?:(?:module\.)?exports|[A-Za-z_$][\w$]*(?:\.prototype)?)\.([A-Za-z_$][\w$]*)\s*="
    r"\s*(?:async\s+)?function\b"
    r"|^[ \t]*(?:export\s+)?(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*=\s*(?:async\s+)?"
    r"(?:function\b|\([^)]*\)\s*=>|[A-Za-z_$][\w$]*\s*=>)",
    re.M,
)
_JS = ("javascript", "typescript", "tsx")
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
# Words of the languages themselves (and very common names): never a query or a definition.
_WORDS = (
    "and as assert async await break case catch class const continue def default defer del "
    "delete do elif else enum except export extends false final finally fn for from func go if "
    "impl import in interface is let match mod mut new nil none not null of or pass package "
    "private protected pub public raise return self static struct super switch this throw true "
    "try type typeof use var void while with yield string int bool err error len str print true "
    "false the to "
)
STOP = frozenset(_WORDS.split())


_TERMS: dict[str, tuple[str, ...]] = {}  # identifier -> its terms (identifiers repeat a lot)


def terms_of_name(name: str) -> tuple[str, ...]:
    """The terms of one identifier: itself lowercased and, when it has several, its parts of
    three letters or more (none for a stop word or a one-letter name)."""
    found = _TERMS.get(name)
    if found is None:
        low = name.lower()
        if low in STOP or len(name) < 2:
            found = ()
        elif name.isalpha() and name.islower():  # one part: the name itself (no regex)
            found = (name,)
        else:
            parts = [p.lower() for p in _PARTS.findall(name)]
            extra = [p for p in parts if len(p) > 2 and p not in STOP] if len(parts) > 1 else []
            found = (low, *extra)
        if len(_TERMS) < 1_000_000:
            _TERMS[name] = found
    return found


def terms_of(text: str) -> list[str]:
    """Lowercased identifiers and their parts (snake_case and camelCase split), stop words out."""
    return [term for name in _IDENT.findall(text) for term in terms_of_name(name)]


@dataclass
class ContextIndex:
    """Everything selection needs besides the chunk texts (kept in `texts`, same order)."""

    key: str
    ids: list[str]
    paths: list[list[str]]  # every file a chunk occurs in (first: where it is located first)
    lines: list[tuple[int, int]]
    tokens: list[int]  # recorded token count (scope header + text)
    languages: list[str | None]
    near: list[str | None]
    rank: np.ndarray  # registry rank as a percentile in [0, 1]
    defs: dict[str, list[int]]
    files: dict[str, list[int]]  # file -> its chunks in byte order (they tile the file)
    language_of: dict[str, str | None]
    postings: dict[str, list[list[int]]]  # term -> [chunk indices, term counts]
    doc_len: np.ndarray
    texts: list[str]

    def names_of(self, i: int) -> list[str]:
        """The names chunk `i` defines, in the order the registry lists them."""
        if not hasattr(self, "_names"):
            names: dict[int, list[str]] = {}
            for name, chunks in self.defs.items():
                for k in chunks:
                    names.setdefault(k, []).append(name)
            object.__setattr__(self, "_names", names)
        return self._names.get(i, [])  # type: ignore[attr-defined]

    def memo(self, key: Any, make: Any) -> Any:
        """A value derived from the index alone, made once per index."""
        if not hasattr(self, "_memo"):
            object.__setattr__(self, "_memo", {})
        store = self._memo  # type: ignore[attr-defined]
        if key not in store:
            store[key] = make()
        return store[key]

    def file_chunks(self, path: str) -> np.ndarray:
        """The chunks of `path` as an index array."""
        return self.memo(("file", path), lambda: np.asarray(self.files.get(path, ()), dtype=int))

    def signatures_of(self, i: int, limit: int) -> list[str]:
        """The signature lines of the first `limit` names chunk `i` defines (memoised: they
        do not depend on the request)."""
        memo = self.memo("signature-lines", dict)
        if (i, limit) not in memo:
            found = (signature_line(self.texts[i], n) for n in self.names_of(i)[:limit])
            memo[i, limit] = [line for line in found if line is not None]
        return memo[i, limit]

    def _posting(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        idx, tf = self.postings[term]
        return np.asarray(idx, dtype=np.int64), np.asarray(tf, dtype=np.float64)

    def bm25(self, query: dict[str, float], k1: float = 1.2, b: float = 0.75) -> np.ndarray:
        """BM25 of every chunk for weighted query terms."""
        scores = np.zeros(len(self.ids), dtype=np.float64)
        n = len(self.ids)
        average = float(self.doc_len.mean()) if n else 1.0
        norm = k1 * (1 - b + b * self.doc_len / max(average, 1e-9))
        for term, weight in query.items():
            if term not in self.postings:
                continue
            idx, tf = self.memo(("postings", term), lambda t=term: self._posting(t))
            idf = math.log(1 + (n - len(idx) + 0.5) / (len(idx) + 0.5))
            scores[idx] += weight * idf * tf * (k1 + 1) / (tf + norm[idx])
        return scores


def index_key(header: ChunksHeader, registry: Registry | None) -> str:
    parts = [str(INDEX_VERSION), header.digest, registry.digest if registry else ""]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def load_index(
    header: ChunksHeader, chunks: tuple[Chunk, ...], registry: Registry | None
) -> ContextIndex:
    """The cached index of these chunks (built and cached when missing, damaged, or not the
    shape an index of these chunks has: a cache entry is never trusted further than that)."""
    key = index_key(header, registry)
    path = cache_dir() / "context" / f"{key}.json"
    data = None
    try:
        raw = path.read_bytes()
        digest, _, body = raw.partition(b"\n")
        if digest.decode() == hashlib.sha256(body).hexdigest():
            data = orjson.loads(body)
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        data = None
    if not _well_formed(data, key, len(chunks)):
        data = build_index_data(key, chunks, registry)
        body = orjson.dumps(data)
        with contextlib.suppress(OSError):  # a read-only cache: rebuilt next time
            write_bytes(path, hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    return _from_data(data, [c.text for c in chunks])


_PER_CHUNK = ("ids", "paths", "lines", "tokens", "languages", "near", "rank", "doc_len")
_BY_NAME = ("defs", "files", "postings")


def _well_formed(data: Any, key: str, n: int) -> bool:
    """A cache entry holds an index of `n` chunks: every per-chunk list `n` long, every chunk
    number it names in range (what selection indexes with), the right types throughout."""
    if not isinstance(data, dict) or data.get("key") != key:
        return False
    try:
        if any(not isinstance(data[k], list) or len(data[k]) != n for k in _PER_CHUNK):
            return False
        if any(not isinstance(data[k], dict) for k in (*_BY_NAME, "language_of")):
            return False
        numbers = [i for rows in data["defs"].values() for i in rows]
        numbers += [i for rows in data["files"].values() for i in rows]
        counts = []
        for idx, tf in data["postings"].values():
            numbers += idx
            counts += tf
            if len(idx) != len(tf):
                return False
        ids = np.asarray(numbers, dtype=np.int64)
        paths_ok = all(
            isinstance(p, list) and p and all(isinstance(x, str) for x in p) for p in data["paths"]
        )
        lines = np.asarray(data["lines"], dtype=np.int64).reshape(n, 2)
        floats = [np.asarray(data[k], dtype=np.float64) for k in ("tokens", "rank", "doc_len")]
        np.asarray(counts, dtype=np.float64)
    except (KeyError, TypeError, ValueError, OverflowError):
        return False
    return bool(
        paths_ok
        and (ids.size == 0 or (ids.min() >= 0 and ids.max() < n))
        and (lines.size == 0 or lines.min() >= 1)
        and all(np.isfinite(f).all() for f in floats)
        and all(isinstance(x, str) for x in data["ids"])
    )


def _defined_names(chunk: Chunk) -> list[str]:
    names = [e.name for e in chunk.entities]
    if chunk.language in _JS:
        names += [a or b for a, b in _JS_DEFINES.findall(chunk.text)]
    return list(dict.fromkeys(names))


def build_index_data(
    key: str, chunks: tuple[Chunk, ...], registry: Registry | None
) -> dict[str, Any]:
    ranks = {e.id: e.rank for e in registry.entries} if registry else {}
    order = sorted(ranks, key=lambda i: ranks[i])
    percentile = {cid: (k + 1) / len(order) for k, cid in enumerate(order)}
    defs: dict[str, list[int]] = {}
    files: dict[str, list[int]] = {}
    language_of: dict[str, str | None] = {}
    postings: dict[str, list[list[int]]] = {}
    spans: dict[str, list[tuple[int, int]]] = {}
    doc_len = []
    for i, chunk in enumerate(chunks):
        for name in _defined_names(chunk):
            if len(name) >= 2 and name.lower() not in STOP:
                defs.setdefault(name, []).append(i)
        for location in chunk.locations:
            spans.setdefault(location.path, []).append((location.start_byte, i))
            language_of[location.path] = chunk.language
        terms = terms_of(chunk.text)
        doc_len.append(len(terms))
        for term, count in Counter(terms).items():
            row = postings.get(term)
            if row is None:
                postings[term] = [[i], [count]]
            else:
                row[0].append(i)
                row[1].append(count)
    for path, found in spans.items():  # a file's chunks in the order they tile it
        files[path] = [i for _, i in sorted(found)]
    return {
        "key": key,
        "ids": [c.id for c in chunks],
        "paths": [list(dict.fromkeys(loc.path for loc in c.locations)) for c in chunks],
        "lines": [[c.start_line, c.end_line] for c in chunks],
        "tokens": [c.token_count for c in chunks],
        "languages": [c.language for c in chunks],
        "near": [c.near_duplicate_of for c in chunks],
        "rank": [percentile.get(c.id, 0.0) for c in chunks],
        "defs": defs,
        "files": files,
        "language_of": language_of,
        "postings": postings,
        "doc_len": doc_len,
    }


def _from_data(data: dict[str, Any], texts: list[str]) -> ContextIndex:
    return ContextIndex(
        key=data["key"],
        ids=data["ids"],
        paths=data["paths"],
        lines=[tuple(x) for x in data["lines"]],
        tokens=data["tokens"],
        languages=data["languages"],
        near=data["near"],
        rank=np.asarray(data["rank"], dtype=np.float64),
        defs=data["defs"],
        files=data["files"],
        language_of=data["language_of"],
        postings=data["postings"],
        doc_len=np.asarray(data["doc_len"], dtype=np.float64),
        texts=texts,
    )
