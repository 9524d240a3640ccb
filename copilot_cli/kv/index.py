"""The radix tree of a KV folder, rebuilt from its index: the longest stored prefix of any token
sequence, down to the segments (and the parts of them) that hold its keys and values.

A stored prefix of L tokens holds the KV of every shorter prefix too, so a request that shares
only the first N tokens of a stored prefix can still be served those N (a server rounds N down
to its own block size).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Node:
    segment: str
    start: int
    token_ids: list[int]
    children: dict[int, _Node] = field(default_factory=dict)  # first token id -> child


@dataclass(frozen=True)
class PrefixMatch:
    """How many leading tokens a folder holds, and the segments holding them (hash, start,
    length), the last one possibly used only in part."""

    length: int
    segments: tuple[tuple[str, int, int], ...]

    def covering(self, start: int, end: int) -> list[tuple[str, int, int]]:
        """The segments that hold positions [start, end)."""
        return [s for s in self.segments if s[1] < end and s[1] + s[2] > start]


class PrefixTree:
    """Built from a KV folder's index.json (no segment file is read)."""

    def __init__(self, index: dict[str, Any]) -> None:
        self.root = _Node("", 0, [])
        built: dict[str, _Node] = {}
        for entry in index["prefixes"].values():
            ids = entry["token_ids"]
            parent = self.root
            for seg_hash in entry["segments"]:
                node = built.get(seg_hash)
                if node is None:
                    info = index["segments"][seg_hash]
                    start, length = info["start"], info["length"]
                    node = built[seg_hash] = _Node(seg_hash, start, ids[start : start + length])
                    if node.token_ids:
                        parent.children[node.token_ids[0]] = node
                parent = node

    def match(self, token_ids: list[int]) -> PrefixMatch:
        """The longest stored prefix of `token_ids`."""
        node, position, used = self.root, 0, []
        while position < len(token_ids):
            child = node.children.get(token_ids[position])
            if child is None:
                break
            common = 0
            for mine, theirs in zip(child.token_ids, token_ids[position:], strict=False):
                if mine != theirs:
                    break
                common += 1
            used.append((child.segment, child.start, len(child.token_ids)))
            position += common
            if common < len(child.token_ids):
                break
            node = child
        return PrefixMatch(position, tuple(used))
