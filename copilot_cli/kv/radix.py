"""A radix tree over token-id sequences: shared leading tokens are stored (and prefilled) once.

Each edge holds a run of token ids (a segment). A prefix is the chain of segments from the
root to its node. Prefilling walks the tree depth-first and extends each child from its
parent's cache, so work and disk grow with the number of distinct tokens, not with the sum of
prefix lengths.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from copilot_cli.core.tokens import common_prefix_length


@dataclass
class Segment:
    """A run of token ids on one edge of the tree."""

    token_ids: list[int]
    start: int  # position of its first token in every prefix that contains it
    children: list[Segment] = field(default_factory=list)
    parent: Segment | None = field(default=None, repr=False)
    prefixes: list[str] = field(default_factory=list)  # names of prefixes ending exactly here

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


class RadixTree:
    """Insert named token sequences; iterate segments parent-before-child."""

    def __init__(self) -> None:
        self.root = Segment(token_ids=[], start=0)
        self._ends: dict[str, Segment] = {}

    def insert(self, name: str, token_ids: list[int]) -> None:
        if name in self._ends:
            raise ValueError(f"prefix {name!r} inserted twice")
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
