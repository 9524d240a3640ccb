"""Package `__init__`s that name their exports without importing them: a name's module is
imported on first use, so importing one light submodule (options, records) never pulls in
torch or transformers through its package."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
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
