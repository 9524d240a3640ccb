"""An option's name in the library -> the flag that set it, for error lines (`--max-tokens`:
..., never `max_tokens`: ...)."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any


def command_flags(func: Callable[..., Any]) -> dict[str, str]:
    """A command function's parameters -> their long flag (arguments -> their NAME); an option
    declared by an options field (cli.params.from_options) under the field's name as well."""
    flags: dict[str, str] = {}
    hints = typing.get_type_hints(func, include_extras=True)
    for name, param in inspect.signature(func).parameters.items():
        infos = [*getattr(hints.get(name), "__metadata__", ()), param.default]
        for info in infos:
            if not hasattr(info, "param_decls"):
                continue
            # with Annotated, typer takes the first flag as the option's `default` slot
            given = [getattr(info, "default", None), *(getattr(info, "param_decls", ()) or ())]
            decls = [d for d in given if isinstance(d, str) and d.startswith("--")]
            flags[name] = decls[0] if decls else name.upper()
            source = getattr(info, "declared_by", None)
            if source is not None:
                flags.setdefault(source[1], flags[name])
    return flags


def flag_for(option: str, flags: dict[str, str]) -> str:
    """The flag of option `option` (`max_tokens` -> `--max-tokens`), else the option name."""
    for name in (option, option.rsplit(".", 1)[-1]):
        if name in flags:
            return flags[name]
    return option
