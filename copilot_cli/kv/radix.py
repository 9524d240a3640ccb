"""A radix tree over token-id sequences: shared leading tokens are stored (and prefilled) once.

Each edge holds a run of token ids (a segment). A prefix is the chain of segments from the
root to its node. Prefilling walks the tree depth-first and extends each child from its
parent's cache, so work and disk grow with the number of distinct tokens, not with the sum of
prefix lengths.

The same tree serves lookups: `RadixTree.from_index` rebuilds a KV folder's tree from its
index (no segment file read, each segment named by its hash) and `match` finds the longest
stored prefix of any token sequence, down to the segments (and the parts of them) that hold
its keys and values. A stored prefix of L tokens holds the KV of every shorter prefix too, so
a request that shares only the first N tokens of a stored prefix can still be served those N
(a server rounds N down to its own block size).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from copilot_cli.core.tokens import common_prefix_length


@dataclass
class Segment:
    """A run of token ids on one edge of the tree."""

    token_ids: list[int]
    start: int  # position of its first token in every prefix that contains it
    children: list[Segment] = field(default_factory=list)
    parent: Segment | None = field(default=None, repr=False)
    prefixes: list[str] = field(default_factory=list)  # names of prefixes ending exactly here
    hash: str = ""  # its segment hash, in a tree rebuilt from a KV folder's index

    @property
    def end(self) -> int:
        return self.start + len(self.token_ids)

    def chain(self) -> list[Segment]:
        """Segments from the root's first child down to this one."""
        out: list[Segment] = []
        node: Segment | None = self
        while node is not None and node.token_ids:
            out.append(node)
            node = node.parent
        return out[::-1]


@dataclass(frozen=True)
class PrefixMatch:
    """How many leading tokens a folder holds, and the segments holding them (hash, start,
    length), the last one possibly used only in part."""

    length: int
    segments: tuple[tuple[str, int, int], ...]

    def covering(self, start: int, end: int) -> list[tuple[str, int, int]]:
        """The segments that hold positions [start, end)."""
        return [s for s in self.segments if s[1] < end and s[1] + s[2] > start]


class RadixTree:
    """Insert named token sequences; iterate segments parent-before-child; match a sequence
    against the stored ones."""

    def __init__(self) -> None:
        self.root = Segment(token_ids=[], start=0)
        self._ends: dict[str, Segment] = {}
        self._first: dict[int, dict[int, Segment]] = {}  # id(node) -> first token -> child

    @classmethod
    def from_index(cls, index: Any) -> RadixTree:
        """The tree a KV folder was written from, rebuilt from its KVIndex."""
        tree = cls()
        built: dict[str, Segment] = {}
        for entry in index.prefixes.values():
            parent = tree.root
            for info in index.chain(entry.name):
                node = built.get(info.hash)
                if node is None:
                    ids = list(entry.token_ids[info.start : info.start + info.length])
                    node = built[info.hash] = Segment(
                        ids, info.start, parent=parent, hash=info.hash
                    )
                    parent.children.append(node)
                parent = node
            parent.prefixes.append(entry.name)
            tree._ends[entry.name] = parent
        return tree

    def match(self, token_ids: list[int]) -> PrefixMatch:
        """The longest stored prefix of `token_ids` (segments named by hash)."""
        node, position, used = self.root, 0, []
        while position < len(token_ids):
            child = self._child(node, token_ids[position])
            if child is None:
                break
            common = common_prefix_length(child.token_ids, token_ids[position:])
            used.append((child.hash, child.start, len(child.token_ids)))
            position += common
            if common < len(child.token_ids):
                break
            node = child
        return PrefixMatch(position, tuple(used))

    def _child(self, node: Segment, token: int) -> Segment | None:
        table = self._first.get(id(node))
        if table is None:
            table = self._first[id(node)] = {c.token_ids[0]: c for c in node.children}
        return table.get(token)

    def insert(self, name: str, token_ids: list[int]) -> None:
        if name in self._ends:
            raise ValueError(f"prefix {name!r} inserted twice")
        self._first.clear()
        if not token_ids:
            raise ValueError(f"prefix {name!r} is empty")
        node, position = self.root, 0
        while position < len(token_ids):
            child = next((c for c in node.children if c.token_ids[0] == token_ids[position]), None)
            if child is None:
                leaf = Segment(token_ids=list(token_ids[position:]), start=position, parent=node)
                node.children.append(leaf)
                node, position = leaf, len(token_ids)
                break
            shared = common_prefix_length(child.token_ids, token_ids[position:])
            if shared < len(child.token_ids):
                self._split(child, shared)
            node, position = child, position + shared
        node.prefixes.append(name)
        self._ends[name] = node

    def _split(self, segment: Segment, at: int) -> None:
        """Cut `segment` after `at` tokens; the tail becomes its only child."""
        tail = Segment(
            token_ids=segment.token_ids[at:],
            start=segment.start + at,
            children=segment.children,
            parent=segment,
            prefixes=segment.prefixes,
        )
        for child in tail.children:
            child.parent = tail
        for name in tail.prefixes:
            self._ends[name] = tail
        segment.token_ids = segment.token_ids[:at]
        segment.children = [tail]
        segment.prefixes = []

    def end_of(self, name: str) -> Segment:
        return self._ends[name]

    def segments(self) -> Iterator[Segment]:
        """Every segment, parents before children, siblings by first token id (deterministic)."""
        stack = sorted(self.root.children, key=_order, reverse=True)
        while stack:
            segment = stack.pop()
            yield segment
            stack.extend(sorted(segment.children, key=_order, reverse=True))

    def total_tokens(self) -> int:
        """Distinct tokens stored (sum of segment lengths)."""
        return sum(len(s.token_ids) for s in self.segments())


def _order(segment: Segment) -> tuple[int, ...]:
    return tuple(segment.token_ids[:8])
