"""Code files: pieces from the tree-sitter syntax tree, split at entity children when too big."""

from __future__ import annotations

from typing import Any

from copilot_cli.chunking.languages import BODIES, COMMENTS, ENTITIES, entity_of
from copilot_cli.chunking.packer import FileText, Piece


def partition(
    file: FileText, start: int, end: int, nodes: list[Any], scope: tuple[str, ...]
) -> list[Piece]:
    """Cut [start, end) at the starting lines of `nodes`: line-aligned pieces that cover it.

    A piece holding exactly one node keeps it (so it can be split further at its children);
    text before the first node (a header, comments) is a piece of its own.
    """
    bounds: dict[int, list[Any]] = {}
    for node in nodes:
        line_start = max(file.line_start(node.start_byte), start)
        if start <= line_start < end:
            bounds.setdefault(line_start, []).append(node)
    cuts = sorted(bounds)
    if not cuts or cuts[0] != start:
        cuts.insert(0, start)
    pieces = []
    for index, cut in enumerate(cuts):
        stop = cuts[index + 1] if index + 1 < len(cuts) else end
        owned = bounds.get(cut, [])
        node = owned[0] if len(owned) == 1 and owned[0].end_byte <= stop else None
        pieces.append(Piece(cut, stop, node, scope))
    return pieces


def _body_children(node: Any) -> list[Any]:
    """The children a too-large node is split into.

    An entity (class, function...) splits into its body's statements, after its header. A
    compound statement (try/except/else, if/elif/else, with, for) splits into all its clauses,
    with each clause body's statements inlined, so a definition nested in any branch stays
    whole.
    """
    if entity_of(node) is not None:
        for child in node.named_children:
            if child.type in BODIES and child.named_children:
                return list(child.named_children)
    out: list[Any] = []
    for child in node.named_children:
        if child.type in BODIES:
            out.extend(child.named_children)
        else:
            out.append(child)
    return out


def _unwrap(node: Any) -> Any:
    """Step through wrappers (export, decorators, templates) to the entity they hold."""
    while entity_of(node) is None:
        inner = [
            c
            for c in node.named_children
            if c.type not in COMMENTS and (c.type in ENTITIES or c.named_child_count)
        ]
        entities = [c for c in inner if c.type in ENTITIES]
        if len(entities) == 1:
            node = entities[0]
        elif len(inner) == 1 and inner[0].type not in BODIES:
            node = inner[0]
        else:
            break
    return node


def make_children(file: FileText):
    """The Packer's splitter for code: entity -> header + its body's children."""

    def children(piece: Piece) -> list[Piece] | None:
        target = _unwrap(piece.node)
        entity = entity_of(target)
        scope = piece.scope + ((entity.label,) if entity is not None else ())
        inner = _body_children(target)
        if not inner:
            return None
        return partition(file, piece.start, piece.end, inner, scope)

    return children


def top_level_pieces(file: FileText, root: Any) -> list[Piece]:
    return partition(file, 0, len(file.data), list(root.named_children), ())
