"""The chunk registry: reusable chunks with a semantic type, reuse count, locations, and a rank
from the repository's symbol reference graph (PageRank), so the most central context can be
prefilled or cached first.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

_TEST = re.compile(
    r"(^|/)(tests?|__tests__|spec)/|(^|/)test_[^/]*$|_test\.\w+$|\.(test|spec)\.\w+$"
)
_CONFIG_SUFFIXES = {".json", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".conf", ".xml"}
_CONFIG_NAMES = {
    "Makefile",
    "Dockerfile",
    "Cargo.toml",
    "package.json",
    "pyproject.toml",
    "go.mod",
    "setup.cfg",
    ".gitignore",
}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def semantic_type(chunk: dict[str, Any], mode: str) -> str:
    path = chunk["path"]
    name = PurePosixPath(path).name
    if _TEST.search(path):
        return "test"
    if mode == "prose":
        return "doc"
    if name in _CONFIG_NAMES or PurePosixPath(path).suffix in _CONFIG_SUFFIXES:
        return "config"
    kinds = {e["kind"] for e in chunk.get("entities", [])}
    if kinds & {"class", "struct", "impl", "interface", "trait", "enum", "record"}:
        return "class"
    if kinds & {"function", "method", "constructor"}:
        return "function"
    return "code"


def pagerank(
    edges: dict[str, set[str]], nodes: list[str], damping: float = 0.85, iterations: int = 50
) -> dict[str, float]:
    """PageRank over `nodes`; an edge a -> b means chunk a references a symbol defined in b."""
    n = len(nodes)
    if n == 0:
        return {}
    rank = dict.fromkeys(nodes, 1.0 / n)
    incoming: dict[str, list[str]] = {node: [] for node in nodes}
    for source, targets in edges.items():
        for target in targets:
            incoming[target].append(source)
    out_degree = {node: len(edges.get(node, ())) for node in nodes}
    for _ in range(iterations):
        dangling = sum(rank[node] for node in nodes if out_degree[node] == 0) / n
        rank = {
            node: (1 - damping) / n
            + damping * (dangling + sum(rank[src] / out_degree[src] for src in incoming[node]))
            for node in nodes
        }
    return rank


def build_registry(chunks: list[dict[str, Any]], modes: dict[str, str]) -> list[dict[str, Any]]:
    """Registry entries for every written chunk, most central first."""
    defines: dict[str, set[str]] = {}
    for chunk in chunks:
        for entity in chunk.get("entities", []):
            if len(entity["name"]) >= 3:
                defines.setdefault(entity["name"], set()).add(chunk["id"])
    edges: dict[str, set[str]] = {}
    near_refs: dict[str, int] = {}
    for chunk in chunks:
        used = set(_IDENT.findall(chunk["text"]))
        targets = set()
        for name in used & defines.keys():
            targets |= defines[name] - {chunk["id"]}
        if targets:
            edges[chunk["id"]] = targets
        if "near_duplicate_of" in chunk:
            near_refs[chunk["near_duplicate_of"]] = near_refs.get(chunk["near_duplicate_of"], 0) + 1
    ranks = pagerank(edges, [c["id"] for c in chunks])
    referenced_by: dict[str, int] = {}  # chunks whose text uses a symbol this one defines
    for targets in edges.values():
        for target in targets:
            referenced_by[target] = referenced_by.get(target, 0) + 1
    entries = []
    for chunk in chunks:
        entries.append(
            {
                "id": chunk["id"],
                "type": semantic_type(chunk, modes.get(chunk["path"], "code")),
                "reuse_count": len(chunk["locations"]) + near_refs.get(chunk["id"], 0),
                "locations": chunk["locations"],
                "entities": chunk.get("entities", []),
                "rank": round(ranks.get(chunk["id"], 0.0), 10),
                "referenced_by": referenced_by.get(chunk["id"], 0),
                "token_count": chunk["token_count"],
            }
        )
    entries.sort(key=lambda e: (-e["rank"], e["id"]))
    return entries
