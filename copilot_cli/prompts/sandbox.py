"""The one Jinja2 environment templates render in: sandboxed, strict, bounded.

- ImmutableSandboxedEnvironment: no attribute starting with `_`, no mutation of lists/dicts,
  no Python internals (`lipsum.__globals__`, `''.__class__.__mro__` raise SecurityError).
- StrictUndefined: a missing variable is an error, never a silent "".
- Autoescape off (prompts are not HTML); `tojson` does not HTML-escape.
- Whitespace policy (pinned by golden tests): trim_blocks=True (a block tag's own newline is
  dropped), lstrip_blocks=True (indentation before a block tag is dropped),
  keep_trailing_newline=True (a file's final newline is part of the output).
- Bounded output: string repetition, padding widths and `**` are checked before they run, and
  rendering streams with a character budget, so `{{ 'x' * 10**9 }}` fails fast in bounded memory.
- Includes resolve only inside the template folder (no `..`, no symlink out).
"""

from __future__ import annotations

import json
import operator
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.exceptions import SecurityError, TemplateNotFound
from jinja2.sandbox import ImmutableSandboxedEnvironment

ENV_OPTIONS: dict[str, Any] = {
    "trim_blocks": True,
    "lstrip_blocks": True,
    "keep_trailing_newline": True,
    "autoescape": False,
    "undefined": "StrictUndefined",
}
MAX_OUTPUT_CHARS = 1_000_000
_WIDTH_DIGITS = re.compile(r"\d{7,}")
_PADDING_METHODS = {"ljust", "rjust", "center", "zfill", "expandtabs", "format", "replace"}
# Filters whose value changes from one render to the next: never part of a static prefix.
VOLATILE_FILTERS = frozenset({"random", "shuffle"})


def tojson(value: Any, indent: int | None = None) -> str:
    """JSON for prompts: no HTML escaping (unlike Jinja's default), non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False, indent=indent)


class PromptSandbox(ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment with size checks on the operations that can blow up."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def __init__(
        self, loader: jinja2.BaseLoader | None = None, *, max_output_chars: int = MAX_OUTPUT_CHARS
    ) -> None:
        super().__init__(
            loader=loader,
            undefined=jinja2.StrictUndefined,
            autoescape=False,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            auto_reload=False,
            cache_size=1024,  # includes are looked up on every render: keep them loaded
        )
        self.max_output_chars = max_output_chars
        self.policies["json.dumps_function"] = tojson
        self.filters["tojson"] = tojson
        for unsafe_global in ("lipsum", "cycler", "joiner"):
            self.globals.pop(unsafe_global, None)
        for name in ("center", "indent", "wordwrap", "truncate"):
            self.filters[name] = self._bounded(self.filters[name])

    def _check_size(self, size: int, what: str) -> None:
        if size > self.max_output_chars:
            raise SecurityError(
                f"{what} would produce {size:,} characters (limit {self.max_output_chars:,})"
            )

    def _bounded(self, func: Callable[..., Any]) -> Callable[..., Any]:
        def checked(*args: Any, **kwargs: Any) -> Any:
            for value in list(args[1:]) + list(kwargs.values()):
                if isinstance(value, int) and not isinstance(value, bool):
                    self._check_size(abs(value), f"filter {func.__name__} width")
            return func(*args, **kwargs)

        checked.__name__ = func.__name__
        for attr in ("jinja_pass_arg",):
            if hasattr(func, attr):
                setattr(checked, attr, getattr(func, attr))
        return checked

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        if operator_name == "*":
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
                    self._check_size(len(seq) * max(count, 0), "repetition")
            return operator.mul(left, right)
        if operator_name == "**":
            big = isinstance(right, int) and isinstance(left, int) and abs(left) > 1
            if big and right > 4096:
                raise SecurityError(f"exponent {right} is too large")
            return operator.pow(left, right)
        if operator_name == "%" and isinstance(left, str):
            self._check_format(left, right if isinstance(right, (tuple, dict)) else (right,))
            return operator.mod(left, right)
        return super().call_binop(context, operator_name, left, right)

    def _check_format(self, fmt: str, values: Any) -> None:
        if _WIDTH_DIGITS.search(fmt):
            raise SecurityError("a format width or precision is too large")
        items = values.values() if isinstance(values, dict) else values
        for value in items:
            if isinstance(value, int) and not isinstance(value, bool):
                self._check_size(abs(value), "format argument")

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt = value.__self__

        def checked(*args: Any, **kwargs: Any) -> str:
            self._check_format(fmt, [*args, *kwargs.values()])
            return wrapped(*args, **kwargs)

        return checked

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(__obj, "__name__", "")
        if isinstance(getattr(__obj, "__self__", None), str) and name in _PADDING_METHODS:
            for value in list(args) + list(kwargs.values()):
                if isinstance(value, int) and not isinstance(value, bool):
                    __self._check_size(abs(value), f"str.{name} width")
                if isinstance(value, str) and _WIDTH_DIGITS.search(value):
                    raise SecurityError(f"str.{name}: width in {value!r} is too large")
            if name == "format" and _WIDTH_DIGITS.search(__obj.__self__):
                raise SecurityError("format width is too large")
        return super().call(__context, __obj, *args, **kwargs)


class FolderLoader(jinja2.BaseLoader):
    """Loads templates from one folder and refuses any path that leaves it."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.realpath(root))

    def resolve(self, name: str) -> Path:
        pieces = name.replace("\\", "/").split("/")
        if name.startswith("/") or any(p in ("..", "") for p in pieces):
            raise TemplateNotFound(f"{name} (outside the template folder)")
        path = Path(os.path.realpath(self.root.joinpath(*pieces)))
        if path != self.root and self.root not in path.parents:
            raise TemplateNotFound(f"{name} (resolves outside the template folder)")
        if not path.is_file():
            raise TemplateNotFound(name)
        return path

    def get_source(self, environment: jinja2.Environment, template: str):
        path = self.resolve(template)
        try:
            source = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TemplateNotFound(f"{template} (not UTF-8: {exc.reason})") from exc
        return source, str(path), lambda: True


def make_environment(loader: jinja2.BaseLoader | None = None) -> PromptSandbox:
    """The environment every template compiles and renders in."""
    return PromptSandbox(loader)


def bounded_render(
    template: jinja2.Template, variables: dict[str, Any], max_chars: int = MAX_OUTPUT_CHARS
) -> str:
    """Render `template` streaming, stopping as soon as the output exceeds `max_chars`."""
    pieces: list[str] = []
    size = 0
    for piece in template.generate(variables):
        size += len(piece)
        if size > max_chars:
            raise SecurityError(f"output exceeds {max_chars:,} characters")
        pieces.append(piece)
    return "".join(pieces)


def is_volatile_filter(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Filter) and node.name in VOLATILE_FILTERS
