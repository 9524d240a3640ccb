"""Languages parsed with tree-sitter (per-language grammar packages, offline) and entities."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from copilot_cli.core import lazy
from copilot_cli.core.syntax import CONFIG, EXTENSIONS, PROSE, grammar, parser_for  # noqa: F401

tree_sitter = lazy.module("tree_sitter")

# node type -> entity kind
ENTITIES: dict[str, str] = {
    "function_definition": "function",
    "class_definition": "class",
    "function_declaration": "function",
    "generator_function_declaration": "function",
    "class_declaration": "class",
    "abstract_class_declaration": "class",
    "method_definition": "method",
    "method_declaration": "method",
    "interface_declaration": "interface",
    "type_alias_declaration": "type",
    "enum_declaration": "enum",
    "constructor_declaration": "constructor",
    "type_declaration": "type",
    "function_item": "function",
    "impl_item": "impl",
    "struct_item": "struct",
    "enum_item": "enum",
    "trait_item": "trait",
    "mod_item": "module",
    "struct_specifier": "struct",
    "class_specifier": "class",
    "namespace_definition": "namespace",
    "record_declaration": "record",
}
# children of these nodes are the units a too-large entity is split into
BODIES = {
    "block",
    "class_body",
    "declaration_list",
    "statement_block",
    "field_declaration_list",
    "compound_statement",
    "interface_body",
    "enum_body",
    "object_type",
    "body",
    "constructor_body",
    "enum_variant_list",
}
COMMENTS = {"comment", "line_comment", "block_comment", "documentation_comment"}
KEYWORD = {
    "function": "def",
    "class": "class",
    "method": "def",
    "struct": "struct",
    "impl": "impl",
    "interface": "interface",
    "trait": "trait",
    "enum": "enum",
    "module": "mod",
    "type": "type",
    "constructor": "constructor",
    "namespace": "namespace",
    "record": "record",
}


@dataclass(frozen=True)
class Entity:
    name: str
    kind: str
    start: int
    end: int

    @property
    def label(self) -> str:
        keyword = (
            "def" if self.kind in ("function", "method") else KEYWORD.get(self.kind, self.kind)
        )
        return f"{keyword} {self.name}"


def _known_types(lang: Any, types: tuple[str, ...]) -> list[str]:
    valid = []
    for node_type in types:
        try:
            tree_sitter.Query(lang, f"({node_type}) @n")
            valid.append(node_type)
        except Exception:  # the grammar has no such node type
            continue
    return valid


@functools.cache
def _entity_comment_query(language: str) -> Any | None:
    """One query capturing entities as @e and comments as @c (one walk of the tree)."""
    lang = grammar(language)
    if lang is None:
        return None
    parts = []
    for name, types in (("e", ENTITIES), ("c", COMMENTS)):
        valid = _known_types(lang, tuple(sorted(types)))
        if valid:
            parts.append("[" + " ".join(f"({t})" for t in valid) + f"] @{name}")
    return tree_sitter.Query(lang, "\n".join(parts)) if parts else None


def entities_and_comments(language: str, root: Any) -> tuple[list[Entity], list[tuple[int, int]]]:
    """(named entities in start order, comment byte ranges) of a tree, from one query run
    in C (instead of a Python tree walk)."""
    query = _entity_comment_query(language)
    if query is None:
        return [], []
    found = tree_sitter.QueryCursor(query).captures(root)
    entities = [entity_of(node) for node in found.get("e", [])]
    return (
        sorted((e for e in entities if e is not None), key=lambda e: (e.start, -e.end)),
        sorted((n.start_byte, n.end_byte) for n in found.get("c", [])),
    )


def entity_name(node: Any) -> str | None:
    """The declared name of an entity node, or None for anonymous ones."""
    name = node.child_by_field_name("name")
    if name is None and node.type == "impl_item":
        name = node.child_by_field_name("type")
    if name is None and node.type == "type_declaration":
        spec = next((c for c in node.named_children if c.type in ("type_spec", "type_alias")), None)
        name = spec.child_by_field_name("name") if spec is not None else None
    if name is None and node.type == "function_definition":  # C/C++: dig through declarators
        declarator = node.child_by_field_name("declarator")
        while declarator is not None and declarator.type not in (
            "identifier",
            "field_identifier",
            "qualified_identifier",
            "operator_name",
        ):
            declarator = declarator.child_by_field_name("declarator")
        name = declarator
    if name is None or name.text is None:
        return None
    return name.text.decode("utf-8", errors="replace")


def entity_of(node: Any) -> Entity | None:
    kind = ENTITIES.get(node.type)
    if kind is None:
        return None
    name = entity_name(node)
    if name is None:
        return None
    if (
        kind == "function"
        and node.parent is not None
        and node.parent.type in BODIES
        and node.parent.parent is not None
        and ENTITIES.get(node.parent.parent.type) == "class"
    ):
        kind = "method"
    start = node.start_byte
    if node.parent is not None and node.parent.type == "decorated_definition":
        start = node.parent.start_byte  # decorators belong to the definition
    return Entity(name=name, kind=kind, start=start, end=node.end_byte)


def all_entities(root: Any) -> list[Entity]:
    """Every named entity in the tree, in source order."""
    found: list[Entity] = []
    stack = [root]
    while stack:
        node = stack.pop()
        entity = entity_of(node)
        if entity is not None:
            found.append(entity)
        stack.extend(reversed(node.named_children))
    return sorted(found, key=lambda e: (e.start, -e.end))
