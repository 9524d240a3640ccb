"""Template shapes refused before they are parsed or compiled, with the line they are on.

Parsing and code generation recurse once per level of nesting, and Python's own compiler has
fixed limits (200 nested parentheses, 100 levels of indentation); its `int()` refuses literals
over 4,300 digits. A template that reaches any of them would end in an internal error (a
RecursionError, a SyntaxError of the generated code, a ValueError): these checks turn each into
a TemplateSyntaxError naming the template and line, far below those limits.
"""

from __future__ import annotations

from typing import Any

from jinja2 import nodes
from jinja2.exceptions import TemplateSyntaxError

MAX_BRACKETS = 40  # (, [ and { open at once inside one expression
MAX_EXPRESSION_DEPTH = 48  # operators and calls nested in one expression: a + b + … + z counts each
MAX_STATEMENT_DEPTH = 32  # blocks (for, if, macro, …) nested in one another
MAX_DIGITS = 1000  # Python's int() refuses 4,300; no prompt needs a tenth of that


def check_tokens(environment: Any, source: str, name: str | None, filename: str | None) -> None:
    """Bracket nesting and number literals, from the tokens (the lexer does not recurse)."""
    depth = 0
    for lineno, kind, value in environment.lexer.tokeniter(source, name, filename):
        if kind == "operator" and value in "([{":
            depth += 1
            if depth > MAX_BRACKETS:
                raise TemplateSyntaxError(
                    f"brackets nested more than {MAX_BRACKETS} deep", lineno, name, filename
                )
        elif kind == "operator" and value in ")]}":
            depth = max(depth - 1, 0)
        elif kind in ("integer", "float") and len(value) > MAX_DIGITS:
            raise TemplateSyntaxError(
                f"a number literal of {len(value):,} characters (at most {MAX_DIGITS:,})",
                lineno,
                name,
                filename,
            )


def check_tree(tree: nodes.Template, name: str | None, filename: str | None) -> None:
    """Expression and block nesting of a parsed template (walked without recursion)."""
    stack: list[tuple[nodes.Node, int, int]] = [(tree, 0, 0)]
    while stack:
        node, statements, expressions = stack.pop()
        if isinstance(node, nodes.Expr):
            expressions += 1
            if expressions > MAX_EXPRESSION_DEPTH:
                raise TemplateSyntaxError(
                    f"an expression nested more than {MAX_EXPRESSION_DEPTH} deep (split it with"
                    " {% set %})",
                    node.lineno,
                    name,
                    filename,
                )
        elif isinstance(node, nodes.Stmt):
            statements += 1
            if statements > MAX_STATEMENT_DEPTH:
                raise TemplateSyntaxError(
                    f"blocks nested more than {MAX_STATEMENT_DEPTH} deep",
                    node.lineno,
                    name,
                    filename,
                )
            expressions = 0
        stack.extend((child, statements, expressions) for child in node.iter_child_nodes())
