"""Imports named at a module's top and made on first use.

`exports`: package `__init__`s that name their exports without importing them (a name's module
is imported on first use, so importing one light submodule, options or records, never pulls in
torch or transformers through its package). `module`: a heavy or optional module named at the
top of a module that must import without it."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


def exports(package: str, table: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list]]:
    """(`__getattr__`, `__dir__`) for `package`, whose public names live in the modules of
    `table` (name -> "module", or "module:attribute" for a name exported under another);
    a name is imported once, then kept on the package."""

    def __getattr__(name: str) -> Any:
        where = table.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = where.partition(":")
        value = getattr(importlib.import_module(module), attribute or name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table})

    return __getattr__, __dir__


class _Deferred(ModuleType):
    """Stands for a module: the first attribute read imports it, and every read and write
    goes to the module itself (so a test's monkeypatch of the module is what the code sees)."""

    def __getattr__(self, name: str) -> Any:
        if name == "__wrapped__":  # inspect.unwrap (doctest's finder) must not import
            raise AttributeError(name)
        return getattr(
            sys.modules.get(self.__name__) or importlib.import_module(self.__name__), name
        )

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(importlib.import_module(self.__name__), name, value)

    def __repr__(self) -> str:
        return f"<deferred module {self.__name__!r}>"


def module(name: str) -> ModuleType:
    """`torch = module("torch")` at a module's top: the dependency is named where a reader
    looks for it, and imported on first use (what PEP 810's `lazy import` does natively), so
    a module whose light paths never touch a heavy or optional package imports without it.
    A package that is not installed fails at first use, as an import there would."""
    loaded = sys.modules.get(name)
    return loaded if loaded is not None else _Deferred(name)
