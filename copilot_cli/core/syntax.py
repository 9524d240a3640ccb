"""tree-sitter grammars from the per-language packages (offline), shared by chunk and prune."""

from __future__ import annotations

import ast
import functools
import importlib
import warnings
from typing import Any

from copilot_cli.core import lazy

tree_sitter = lazy.module("tree_sitter")

EXTENSIONS = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hpp": "cpp",
    ".hh": "cpp",
    ".hxx": "cpp",
}
PROSE = {".md": "markdown", ".markdown": "markdown", ".rst": "rst", ".txt": "text"}
CONFIG = {".json", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".conf", ".xml", ".lock"}
_GRAMMARS = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "java": ("tree_sitter_java", "language"),
    "c": ("tree_sitter_c", "language"),
    "cpp": ("tree_sitter_cpp", "language"),
}


GRAMMARS = tuple(_GRAMMARS)


@functools.cache
def grammar(language: str) -> Any | None:
    """The tree-sitter Language for `language`, or None when its package is missing."""
    spec = _GRAMMARS.get(language)
    if spec is None:
        return None
    try:
        module = importlib.import_module(spec[0])
        return tree_sitter.Language(getattr(module, spec[1])())
    except (ImportError, AttributeError, ValueError):
        return None


@functools.cache
def parser_for(language: str) -> Any | None:
    """A tree-sitter parser for `language`, or None when its grammar package is missing."""
    lang = grammar(language)
    if lang is None:
        return None
    return tree_sitter.Parser(lang)


def parse_clean(text: str | bytes, language: str) -> Any | None:
    """The tree-sitter tree of `text` when it parses without syntax errors, else None. Python
    is also checked with the interpreter's own parser, which is stricter about indentation and
    empty blocks than tree-sitter. Without a grammar: None."""
    parser = parser_for(language)
    if parser is None:
        return None
    data = text.encode("utf-8") if isinstance(text, str) else text
    tree = parser.parse(data)
    if tree.root_node.has_error:
        return None
    if language == "python":
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ast.parse(data)
        except (SyntaxError, ValueError):
            return None
    return tree


def parses(text: str | bytes, language: str) -> bool:
    """Whether `text` parses without syntax errors (True when no grammar is available)."""
    return parser_for(language) is None or parse_clean(text, language) is not None
