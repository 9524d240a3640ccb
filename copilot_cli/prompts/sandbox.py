"""The Jinja2 environments templates render in: sandboxed, strict, and bounded in work.

- ImmutableSandboxedEnvironment: no attribute starting with `_`, no mutation of lists/dicts,
  no Python internals (`lipsum.__globals__`, `''.__class__.__mro__` raise SecurityError).
- StrictUndefined: a missing variable is an error, never a silent "".
- Autoescape off (prompts are not HTML); `tojson` does not HTML-escape.
- Whitespace policy (pinned by golden tests): trim_blocks=True (a block tag's own newline is
  dropped), lstrip_blocks=True (indentation before a block tag is dropped),
  keep_trailing_newline=True (a file's final newline is part of the output).

Bounded work by construction (`RenderLimits`): the sandbox stops code execution, not work, so
every operation that can make a value much larger than its inputs is checked *before* it runs
(`*`, `**`, `+`, `%`, `~`, the padding/joining/replacing filters and str methods); every loop
is charged against an iteration budget; a wall-clock deadline is checked in every hook; and
rendering streams with a character budget. A violation raises SecurityError, which callers
report with the template and line.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import itertools
import json
import operator
import re
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, optimizeconst
from jinja2.exceptions import SecurityError, TemplateSyntaxError
from jinja2.filters import make_attrgetter
from jinja2.sandbox import ImmutableSandboxedEnvironment

from copilot_cli.prompts.limits import (
    RenderLimits,
)
from copilot_cli.prompts.shape import check_tokens, check_tree
from copilot_cli.prompts.sizes import format_widths, items_size, text_size

ENV_OPTIONS: dict[str, Any] = {
    "trim_blocks": True,
    "lstrip_blocks": True,
    "keep_trailing_newline": True,
    "autoescape": False,
    "undefined": "StrictUndefined",
}
# What shapes the generated code: this module's own text (its guards and code generator). Keys
# the per-machine code cache, so editing a guard can never leave stale compiled code behind.
CODEGEN_VERSION = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
MAX_INT_BITS = 1 << 16  # ~19,700 decimal digits: far beyond any prompt, far below a hang
MAX_PIECES = 100_000  # batch/slice counts (as Jinja's own range limit)
MAX_JSON_INDENT = 32
PRODUCED_FACTOR = 4
_SIZED = (str, list, tuple, dict)
_WIDTH_DIGITS = re.compile(r"\d{7,}")
_FORMAT_WIDTH = re.compile(r"%[-+ #0]*(\*|\d+)?(?:\.(\*|\d+))?")
# Filters whose value changes from one render to the next: never part of a static prefix.
VOLATILE_FILTERS = frozenset({"random", "shuffle"})


class _Budget:
    """The live counters of one render."""

    __slots__ = ("deadline", "iterations_left", "limits", "produced_left")

    def __init__(self, limits: RenderLimits) -> None:
        self.limits = limits
        self.iterations_left = limits.max_loop_iterations
        # Everything `{{ }}` produces, macro bodies and `{% set %}` blocks included (their
        # text is then output again, hence the headroom over the output limit).
        self.produced_left = PRODUCED_FACTOR * limits.max_output_chars
        self.deadline = time.monotonic() + limits.max_seconds

    def produce(self, size: int) -> None:
        self.produced_left -= size
        if self.produced_left < 0:
            raise SecurityError(
                f"the render produced more than {PRODUCED_FACTOR * self.limits.max_output_chars:,}"
                " characters in all"
            )

    def charge(self, iterations: int) -> None:
        self.iterations_left -= iterations
        if self.iterations_left < 0:
            raise SecurityError(
                f"loops ran more than {self.limits.max_loop_iterations:,} iterations"
            )
        self.check_time()

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise SecurityError(f"rendering took longer than {self.limits.max_seconds:g} s")


_active: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar(
    "copilot_render_budget", default=None
)


@contextlib.contextmanager
def render_budget(limits: RenderLimits) -> Iterator[None]:
    """Charge everything rendered inside the block to one fresh budget."""
    token = _active.set(_Budget(limits))
    try:
        yield
    finally:
        _active.reset(token)


def tojson(value: Any, indent: int | None = None) -> str:
    """JSON for prompts: no HTML escaping (unlike Jinja's default), non-ASCII kept."""
    if indent is not None and not (isinstance(indent, int) and 0 <= indent <= MAX_JSON_INDENT):
        raise SecurityError(f"tojson indent must be an integer in [0, {MAX_JSON_INDENT}]")
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _text_size(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple)) else 0


def _format_widths(fmt: str) -> list[str]:
    return [w for match in _FORMAT_WIDTH.finditer(fmt) for w in match.groups() if w]


class _BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator with every loop and every `~` routed through the budget."""

    def visit_For(self, node: nodes.For, frame: Any) -> None:
        node.iter = _guard(node.iter, node.lineno)
        if node.recursive:  # `loop(children)` re-enters the loop body with a new iterable
            for call in node.find_all(nodes.Call):
                if isinstance(call.node, nodes.Name) and call.node.name == "loop" and call.args:
                    call.args[0] = _guard(call.args[0], call.lineno)
        super().visit_For(node, frame)

    @optimizeconst
    def visit_Concat(self, node: nodes.Concat, frame: Any) -> None:
        self.write("environment.checked_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _guard(iterable: nodes.Expr, lineno: int) -> nodes.Expr:
    return nodes.Call(
        nodes.EnvironmentAttribute("guarded_loop"), [iterable], [], None, None, lineno=lineno
    )


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """An immutable sandbox whose operations are checked against the active render budget."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "%", "+"})
    _GROWING_FILTERS = ("center", "indent", "wordwrap", "replace", "join", "format", "batch")
    # filters that write a whole value out as text: its size is estimated before they run
    _SERIALIZING_FILTERS = ("string", "tojson", "pprint", "urlencode", "xmlattr")

    def __init__(self, *, limits: RenderLimits | None = None, **options: Any) -> None:
        # no constant folding: the optimizer would run filters at compile time, unbudgeted, and
        # write what they built into the generated code (`'a'|center(999999)|list`: a
        # million-item literal)
        super().__init__(finalize=self._produced, optimized=False, **options)
        self.limits = limits or RenderLimits()
        self.concat = self._checked_join  # every buffer join and the whole render go here
        self.filters["tojson"] = tojson
        self.policies["json.dumps_function"] = tojson
        for name in (*self._GROWING_FILTERS, *self._SERIALIZING_FILTERS, "slice"):
            if name in self.filters:
                self.filters[name] = self._checked_filter(name, self.filters[name])
        self.filters["sum"] = self._sum
        self.globals.pop("lipsum", None)  # text out of nothing: no template needs it

    # -- parsing and compiling: shapes that would break the parser or Python's compiler ---
    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        check_tokens(self, source, name, filename)
        try:
            tree = super()._parse(source, name, filename)
        except RecursionError:
            raise TemplateSyntaxError(
                "the template is nested too deeply", 1, name, filename
            ) from None
        check_tree(tree, name, filename)
        return tree

    def _compile(self, source: str, filename: str) -> Any:
        try:
            return super()._compile(source, filename)
        except (SyntaxError, RecursionError, MemoryError) as exc:  # the generated code's limits
            raise TemplateSyntaxError(
                f"the template is too deeply nested to compile ({type(exc).__name__})",
                1,
                filename,
                filename,
            ) from None

    # -- the budget ---------------------------------------------------------------------
    @property
    def max_output_chars(self) -> int:
        return self.limits.max_output_chars

    def _budget(self) -> _Budget:
        budget = _active.get()
        # Outside render_budget() (a direct Template.render) each loop is bounded on its own;
        # every path of this package renders inside one.
        return budget if budget is not None else _Budget(self.limits)

    def _check_value_text(self, value: Any, what: str) -> None:
        if not isinstance(value, (str, int, float, type(None))):
            self._check_size(text_size(value, self.limits.max_output_chars), what)

    def _check_size(self, size: int, what: str) -> None:
        if size > self.limits.max_output_chars:
            raise SecurityError(
                f"{what} would produce {size:,} characters (limit {self.limits.max_output_chars:,})"
            )

    def _produced(self, value: Any) -> Any:
        """`finalize`: every `{{ }}` value, counted against the render's production budget."""
        if type(value) is not str:  # str() of a container builds all of it: estimate first
            self._check_value_text(value, "a value's text")
        text = value if type(value) is str else str(value)
        budget = _active.get()
        if budget is not None:
            budget.produce(len(text))
        return text

    def _checked_join(self, pieces: Iterable[str]) -> str:
        """Join output pieces unless they add up to more than the output limit.

        Collecting them first is bounded: text from `{{ }}` is charged to the production
        budget as it is made, and literal pieces are references to the template's constants,
        at most a few per loop iteration.
        """
        collected = pieces if type(pieces) is list else list(pieces)
        if sum(map(len, collected)) > self.limits.max_output_chars:
            raise SecurityError(f"output exceeds {self.limits.max_output_chars:,} characters")
        return "".join(collected)

    def guarded_loop(self, iterable: Any, **_frame_vars: Any) -> Any:
        """Charge a loop to the iteration budget: its length up front, else item by item."""
        budget = self._budget()
        try:
            length = len(iterable)
        except TypeError:
            return self._counted(iterable, budget)
        budget.charge(length)
        return iterable

    @staticmethod
    def _counted(iterable: Iterable[Any], budget: _Budget) -> Iterator[Any]:
        for item in iterable:
            budget.charge(1)
            yield item

    def checked_concat(self, parts: Iterable[Any]) -> str:
        """`a ~ b ~ c`, refused before joining when the result would exceed the output limit."""
        parts = list(parts)
        limit = self.limits.max_output_chars
        self._check_size(sum(text_size(p, limit) for p in parts), "'~' concatenation")
        pieces = [str(part) for part in parts]
        self._check_size(sum(map(len, pieces)), "'~' concatenation")
        self._budget().check_time()
        return "".join(pieces)

    # -- operators ------------------------------------------------------------------------
    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        self._budget().check_time()
        if operator_name == "*":
            return self._multiply(left, right)
        if operator_name == "**":
            return self._power(left, right)
        if operator_name == "+":
            if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                self._check_size(len(left) + len(right), "'+'")
            return operator.add(left, right)
        if operator_name == "%" and isinstance(left, str):
            self._check_format(left, right if isinstance(right, (tuple, dict)) else (right,))
            return operator.mod(left, right)
        return super().call_binop(context, operator_name, left, right)

    def _multiply(self, left: Any, right: Any) -> Any:
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
                self._check_size(len(seq) * max(count, 0), "repetition")
        both_int = isinstance(left, int) and isinstance(right, int)
        if both_int and left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise SecurityError(f"integer product beyond {MAX_INT_BITS:,} bits")
        return operator.mul(left, right)

    def _power(self, left: Any, right: Any) -> Any:
        both_int = isinstance(left, int) and isinstance(right, int)
        if both_int and abs(left) > 1 and right > 0 and left.bit_length() * right > MAX_INT_BITS:
            raise SecurityError(f"{left} ** {right} is beyond {MAX_INT_BITS:,} bits")
        return operator.pow(left, right)

    def _check_format(self, fmt: str, values: Any) -> None:
        if _WIDTH_DIGITS.search(fmt):
            raise SecurityError("a format width or precision is too large")
        items = list(values.values() if isinstance(values, dict) else values)
        total = len(fmt) + sum(_text_size(v) for v in items)
        for value in items:
            if isinstance(value, int) and not isinstance(value, bool):
                self._check_size(abs(value), "format argument")
                total += abs(value) if "*" in fmt else 0
        total += sum(int(w) for w in _format_widths(fmt) if w.isdigit())
        self._check_size(total, "'%' formatting")

    # -- method calls -----------------------------------------------------------------------
    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt = value.__self__

        def checked(*args: Any, **kwargs: Any) -> str:
            if _WIDTH_DIGITS.search(fmt) or any(
                isinstance(a, str) and _WIDTH_DIGITS.search(a) for a in (*args, *kwargs.values())
            ):
                raise SecurityError("format width is too large")
            items = [*args, *kwargs.values()]
            for item in items:
                if isinstance(item, int) and not isinstance(item, bool):
                    self._check_size(abs(item), "format argument")
            limit = self.limits.max_output_chars
            fields = fmt.count("{") + 1  # each field may print any argument in full
            values = sum(text_size(i, limit) for i in items) * fields
            self._check_size(len(fmt) + format_widths(fmt) + values, "str.format")
            return wrapped(*args, **kwargs)

        return checked

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        __self._budget().check_time()
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str):
            name = getattr(__obj, "__name__", "")
            if name == "join" and args and not isinstance(args[0], _SIZED):
                args = (list(args[0]), *args[1:])  # materialize, so the size is known first
            __self._check_str_method(owner, name, args, kwargs)
        result = super().call(__context, __obj, *args, **kwargs)
        __self._check_size(_text_size(result), "a call")
        return result

    def _check_str_method(self, text: str, name: str, args: tuple, kwargs: dict) -> None:
        values = [*args, *kwargs.values()]
        widths = [abs(v) for v in values if isinstance(v, int) and not isinstance(v, bool)]
        if name in ("center", "ljust", "rjust", "zfill"):
            self._check_size(max([len(text), *widths]), f"str.{name}")
        elif name == "expandtabs":
            self._check_size(len(text) + text.count("\t") * max(widths or [8]), "str.expandtabs")
        elif name == "replace" and len(args) >= 2:
            self._check_size(_replaced_size(text, args[0], args[1], args[2:]), "str.replace")
        elif name == "join" and args:
            self._check_size(_joined_size(text, args[0], self.max_output_chars), "str.join")
        elif name == "translate" and args and isinstance(args[0], dict):
            longest = max((_text_size(v) for v in args[0].values()), default=1)
            self._check_size(len(text) * max(longest, 1), "str.translate")

    # -- filters ------------------------------------------------------------------------------
    def _checked_filter(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        precheck = getattr(self, f"_filter_{name}")
        passes_env = getattr(func, "jinja_pass_arg", None) is not None

        first = 1 if passes_env else 0

        def checked(*args: Any, **kwargs: Any) -> Any:
            self._budget().check_time()
            if name == "join" and len(args) > first and not isinstance(args[first], _SIZED):
                args = (*args[:first], list(args[first]), *args[first + 1 :])
            call_args = args[first:]
            precheck(*call_args, **kwargs)
            result = func(*args, **kwargs)
            self._check_size(_text_size(result), f"filter {name}")
            return result

        checked.__name__ = name
        if passes_env:
            checked.jinja_pass_arg = func.jinja_pass_arg  # type: ignore[attr-defined]
        return checked

    def _filter_center(self, value: Any, width: Any = 80, *_: Any, **__: Any) -> None:
        if isinstance(width, int):
            self._check_size(max(_text_size(str(value)), abs(width)), "filter center")

    def _filter_indent(self, value: Any, width: Any = 4, *_: Any, **__: Any) -> None:
        pad = len(width) if isinstance(width, str) else abs(width) if isinstance(width, int) else 0
        text = str(value)
        self._check_size(len(text) + (text.count("\n") + 1) * pad, "filter indent")

    def _filter_wordwrap(
        self, value: Any, width: Any = 79, break_long: Any = True, wrapstring: Any = None, *_: Any
    ) -> None:
        text = str(value)
        step = max(width, 1) if isinstance(width, int) else 79
        extra = len(wrapstring) if isinstance(wrapstring, str) else 1
        self._check_size(len(text) + (len(text) // step + 1) * extra, "filter wordwrap")

    def _filter_replace(
        self, value: Any, old: Any = "", new: Any = "", *rest: Any, **_: Any
    ) -> None:
        self._check_size(_replaced_size(str(value), str(old), str(new), rest), "filter replace")

    def _filter_join(self, value: Any, d: Any = "", attribute: Any = None, **_: Any) -> None:
        if attribute is not None:
            getter = make_attrgetter(self, attribute)
            value = [getter(item) for item in value]
        self._check_size(_joined_size(str(d), value, self.max_output_chars), "filter join")

    def _serializing(self, value: Any, name: str, factor: int = 1) -> None:
        limit = self.limits.max_output_chars
        self._check_size(text_size(value, limit) * factor, f"filter {name}")

    def _filter_string(self, value: Any, *_: Any, **__: Any) -> None:
        self._serializing(value, "string")

    def _filter_tojson(self, value: Any, *_: Any, **__: Any) -> None:
        self._serializing(value, "tojson")

    def _filter_pprint(self, value: Any, *_: Any, **__: Any) -> None:
        self._serializing(value, "pprint")

    def _filter_urlencode(self, value: Any, *_: Any, **__: Any) -> None:
        self._serializing(value, "urlencode", 3)  # %XX per byte at most

    def _filter_xmlattr(self, value: Any, *_: Any, **__: Any) -> None:
        self._serializing(value, "xmlattr")

    def _sum(self, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
        """The `sum` filter, sized first; lists and tuples joined in one pass (adding them one
        by one copies the growing result each time: quadratic)."""
        self._budget().check_time()
        items = list(iterable)
        if attribute is not None:
            getter = make_attrgetter(self, attribute)
            items = [getter(item) for item in items]
        kind = type(start)
        if kind in (list, tuple, str):
            limit = self.limits.max_output_chars
            self._check_size(len(start) + items_size(items, limit), "filter sum")
        if kind in (list, tuple) and all(type(item) is kind for item in items):
            return kind(itertools.chain(start, *items))
        return sum(items, start)

    def _filter_format(self, value: Any, *args: Any, **kwargs: Any) -> None:
        self._check_format(str(value), kwargs or args)

    def _filter_batch(self, value: Any, linecount: Any = 1, *_: Any, **__: Any) -> None:
        if isinstance(linecount, int) and linecount > MAX_PIECES:
            raise SecurityError(f"batch size {linecount:,} is over {MAX_PIECES:,}")

    def _filter_slice(self, value: Any, slices: Any = 1, *_: Any, **__: Any) -> None:
        if isinstance(slices, int) and slices > MAX_PIECES:
            raise SecurityError(f"slice count {slices:,} is over {MAX_PIECES:,}")


def _replaced_size(text: str, old: Any, new: Any, rest: tuple) -> int:
    if not isinstance(old, str) or not isinstance(new, str):
        return len(text)
    count = text.count(old) if old else len(text) + 1
    if rest and isinstance(rest[0], int) and rest[0] >= 0:
        count = min(count, rest[0])
    return len(text) + count * max(len(new) - len(old), 0)


def _joined_size(separator: str, items: Any, limit: int) -> int:
    """The length of `separator.join(items)`, each item's text estimated (never built)."""
    parts = list(items) if isinstance(items, dict) else items
    if not isinstance(parts, (str, list, tuple)):
        return 0
    total = len(separator) * max(len(parts) - 1, 0)
    for part in parts:
        total += len(part) if isinstance(part, str) else text_size(part, limit)
        if total > limit:
            break
    return total


class PromptSandbox(BoundedSandbox):
    """The environment every prompt template compiles and renders in."""

    def __init__(
        self, loader: jinja2.BaseLoader | None = None, *, limits: RenderLimits | None = None
    ) -> None:
        super().__init__(
            limits=limits,
            loader=loader,
            undefined=jinja2.StrictUndefined,
            autoescape=False,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            auto_reload=False,
            cache_size=1024,  # includes are looked up on every render: keep them loaded
        )
        for unsafe_global in ("lipsum", "cycler", "joiner"):
            self.globals.pop(unsafe_global, None)


def make_environment(
    loader: jinja2.BaseLoader | None = None, limits: RenderLimits | None = None
) -> PromptSandbox:
    """The environment every template compiles and renders in."""
    return PromptSandbox(loader, limits=limits)


def bounded_render(
    template: jinja2.Template, variables: dict[str, Any], limits: RenderLimits
) -> str:
    """Render `template` charged to a fresh budget of `limits` (the environment's joins stop
    as soon as the output limit is passed)."""
    token = _active.set(_Budget(limits))
    try:
        return template.render(variables)
    finally:
        _active.reset(token)


def is_volatile_filter(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Filter) and node.name in VOLATILE_FILTERS
