"""What a template's syntax tree tells us without rendering it.

- the templates it references (includes, extends, imports), transitively;
- the variables its body (and the parts it pulls in) reads from the caller;
- its static prefix: the leading output that is the same for every valid input, derived from
  the tree (literal text, includes inlined, blocks of a parent layout resolved, constant
  expressions folded) up to the first node whose output depends on an input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import jinja2
from jinja2 import meta, nodes

from copilot_cli.prompts.errors import TemplateError
from copilot_cli.prompts.sandbox import is_volatile_filter

ParseFn = Callable[..., nodes.Template]


@dataclass
class PrefixResult:
    text: str
    stopped_at: str  # why the prefix ends: "end of template" or "line N: <node>"
    volatile: list[str] = field(default_factory=list)


class _Stop(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


def referenced_templates(ast: nodes.Template, where: str) -> list[str]:
    """Names of the templates `ast` includes, extends or imports (all must be constant)."""
    names = []
    for name in meta.find_referenced_templates(ast):
        if name is None:
            raise TemplateError(
                "include/extends/import target must be a constant string (dynamic targets "
                "cannot be checked or precompiled)",
                file=where,
            )
        names.append(name)
    return sorted(set(names))


def template_closure(root: str, parse: ParseFn) -> list[str]:
    """Every template reachable from `root` through includes/extends/imports, sorted."""
    seen: set[str] = set()
    stack: list[tuple[str, str | None]] = [(root, None)]
    while stack:
        name, referrer = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        stack.extend((child, name) for child in referenced_templates(parse(name, referrer), name))
    seen.discard(root)
    return sorted(seen)


def input_variables(root: str, parse: ParseFn, globals_: set[str]) -> set[str]:
    """Variables read from the render context by `root` and what it includes or extends.

    Imported macro files do not see the caller's context, so their names are not inputs.
    """
    used: set[str] = set()
    seen: set[str] = set()
    stack = [root]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        ast = parse(name)
        used |= meta.find_undeclared_variables(ast)
        for node in ast.find_all((nodes.Include, nodes.Extends)):
            if isinstance(node.template, nodes.Const):
                stack.append(node.template.value)
    return used - globals_


class _PrefixWalker:
    def __init__(self, environment: jinja2.Environment, parse: ParseFn) -> None:
        self.eval_ctx = nodes.EvalContext(_folding_view(environment))
        self.parse = parse
        self.out: list[str] = []
        self.volatile: list[str] = []
        self.depth = 0

    def const(self, expr: nodes.Expr) -> object:
        if any(True for _ in expr.find_all(nodes.Filter) if is_volatile_filter(_)) or (
            is_volatile_filter(expr)
        ):
            self.volatile.append(f"line {expr.lineno}: a random value")
            raise _Stop(f"line {expr.lineno}: a value that changes on every render")
        try:
            return expr.as_const(self.eval_ctx)
        except (nodes.Impossible, Exception) as exc:  # anything not foldable is dynamic
            raise _Stop(f"line {expr.lineno}: {_describe(expr)}") from exc

    def walk(self, body: list[nodes.Node], blocks: dict[str, nodes.Block]) -> None:
        for node in body:
            self.node(node, blocks)

    def node(self, node: nodes.Node, blocks: dict[str, nodes.Block]) -> None:
        if isinstance(node, nodes.Output):
            for child in node.nodes:
                value = self.const(child)
                self.out.append(value if isinstance(value, str) else str(value))
        elif isinstance(node, nodes.Include):
            self.include(node, blocks)
        elif isinstance(node, nodes.Block):
            chosen = blocks.get(node.name, node)
            if node.scoped or chosen.scoped:
                raise _Stop(f"line {node.lineno}: scoped block {node.name!r}")
            self.walk(chosen.body, blocks)
        elif isinstance(node, nodes.If):
            self.branch(node, blocks)
        elif isinstance(node, (nodes.Macro, nodes.Import, nodes.FromImport)):
            return  # definitions produce no output
        else:
            raise _Stop(f"line {node.lineno}: {_describe(node)}")

    def include(self, node: nodes.Include, blocks: dict[str, nodes.Block]) -> None:
        if not isinstance(node.template, nodes.Const) or not node.with_context:
            raise _Stop(f"line {node.lineno}: include")
        self.depth += 1
        if self.depth > 32:
            raise _Stop("includes nested deeper than 32")
        self.template(self.parse(node.template.value), {})
        self.depth -= 1

    def branch(self, node: nodes.If, blocks: dict[str, nodes.Block]) -> None:
        branches = [(node.test, node.body), *((e.test, e.body) for e in node.elif_)]
        for test, body in branches:
            if self.const(test):
                self.walk(body, blocks)
                return
        self.walk(node.else_, blocks)

    def template(self, ast: nodes.Template, blocks: dict[str, nodes.Block]) -> None:
        extends = next(iter(ast.find_all(nodes.Extends)), None)
        if extends is None:
            self.walk(ast.body, blocks)
            return
        # Output before {% extends %} is rendered; after it only the parent's layout counts.
        index = ast.body.index(extends) if extends in ast.body else 0
        self.walk(ast.body[:index], blocks)
        if not isinstance(extends.template, nodes.Const):
            raise _Stop(f"line {extends.lineno}: dynamic extends")
        own = {b.name: b for b in ast.find_all(nodes.Block)}
        self.template(self.parse(extends.template.value), {**own, **blocks})


class _FoldingView:
    """The environment as constant folding sees it: `+` of constants folds (its size is bounded
    by the template text); `*`, `**` and `%` stay unfolded, as the sandbox intercepts them."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def __init__(self, environment: jinja2.Environment) -> None:
        self._environment = environment

    def __getattr__(self, name: str) -> object:
        return getattr(self._environment, name)


def _folding_view(environment: jinja2.Environment) -> jinja2.Environment:
    return _FoldingView(environment)  # type: ignore[return-value]


def static_prefix(root: str, environment: jinja2.Environment, parse: ParseFn) -> PrefixResult:
    """The leading output of `root` that no input can change."""
    walker = _PrefixWalker(environment, parse)
    reason = "end of template"
    try:
        walker.template(parse(root), {})
    except _Stop as stop:
        reason = stop.reason
    return PrefixResult(text="".join(walker.out), stopped_at=reason, volatile=walker.volatile)


def _describe(node: nodes.Node) -> str:
    if isinstance(node, nodes.Name):
        return f"variable {node.name!r}"
    if isinstance(node, nodes.Getattr):
        return f"attribute {node.attr!r}"
    if isinstance(node, nodes.Filter):
        return f"filter {node.name!r}"
    return type(node).__name__.lower()
