"""Typed options: each capability's frozen dataclass holds every default and checks its values.

Everything else is derived from those dataclasses, so nothing can drift: the JSON Schema and the
defaults of a `copilot-opt.yaml` section (`schema_of`, `defaults_of`), the conversion of a YAML
mapping into options (`from_mapping`), the CLI's flags with their help and defaults (`setting`
holds them; `default_of`, `help_of`, `flag_of` read them), and the JSON
form of results (`to_jsonable`). A refused value raises `OptionError` naming the *option*; the
CLI turns that into its flag (`--max-tokens`), the build config into its key
(`chunk.max_tokens`). This module imports neither torch nor transformers.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from copilot_cli.core.errors import InputError

YAML = "yaml"  # field metadata key: False keeps a field out of config files
HELP = "help"  # field metadata key: the option's one line of help (--help, docs/cli.md)
FLAG = "flag"  # field metadata key: its command-line flag, where that is not --<name>


class OptionError(InputError):
    """A value given for an option is refused.

    Attributes:
        option: the field name (`max_tokens`, or `thresholds.max_mean_kl` when nested).
    """

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(message, where=option)

    def nested(self, parent: str) -> OptionError:
        return OptionError(f"{parent}.{self.option}", self.message)


def require(condition: bool, option: str, message: str) -> None:
    """Raise OptionError(option, message) unless `condition` holds."""
    if not condition:
        raise OptionError(option, message)


def require_count(value: Any, option: str, *, low: int = 0, high: int | None = None) -> None:
    """An integer (not a bool) in [low, high]: counts, sizes, budgets."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionError(option, f"must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        span = f"[{low:,}, {high:,}]" if high is not None else f">= {low:,}"
        raise OptionError(option, f"{value:,} is outside {span}")


def require_number(
    value: Any, option: str, *, low: float, high: float = math.inf, low_open: bool = False
) -> None:
    """A finite number in [low, high] (or (low, high] with `low_open`). NaN is refused: every
    comparison with it is false, so an unchecked NaN silently disables the check it feeds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OptionError(option, f"must be a number, got {value!r}")
    if not math.isfinite(value):
        raise OptionError(option, f"must be a finite number, got {value}")
    if value < low or (low_open and value == low) or value > high:
        left = "(" if low_open else "["
        right = ")" if math.isinf(high) else "]"
        raise OptionError(option, f"{value:g} is outside {left}{low:g}, {high:g}{right}")


@functools.cache
def _path_fields(cls: type) -> tuple[tuple[str, bool], ...]:
    """(field name, is a tuple of paths) for every Path-typed field of an options class."""
    out = []
    for name, hint in _hints(cls).items():
        inner, _ = _split_optional(hint)
        if inner is Path:
            out.append((name, False))
        elif typing.get_origin(inner) is tuple and Path in typing.get_args(inner):
            out.append((name, True))
    return tuple(out)


def coerce_paths(options: Any) -> None:
    """Let library callers give paths as strings: turn them into Path in a frozen dataclass."""
    for name, many in _path_fields(type(options)):
        value = getattr(options, name)
        if many and isinstance(value, (list, tuple)):
            object.__setattr__(options, name, tuple(Path(v) for v in value))
        elif isinstance(value, str):
            object.__setattr__(options, name, Path(value))


def setting(
    default: Any = dataclasses.MISSING,
    *,
    yaml: bool = True,
    help: str | None = None,
    flag: str | None = None,
    **kwargs: Any,
) -> Any:
    """A dataclass field, the one declaration of an option: its default, its `help` (what the
    command's --help and docs/cli.md say), its `flag` where that is not `--<name>`; `yaml=False`
    keeps it out of config files (paths the pipeline sets)."""
    metadata = {**kwargs.pop("metadata", {}), YAML: yaml}
    metadata.update({k: v for k, v in ((HELP, help), (FLAG, flag)) if v is not None})
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=metadata, **kwargs)
    return dataclasses.field(default=default, metadata=metadata, **kwargs)


def config_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of an options class that a config file may set."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get(YAML, True)]


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _split_optional(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) < len(typing.get_args(hint)):
            return (args[0] if len(args) == 1 else functools.reduce(operator.or_, args)), True
    return hint, False


def _schema_of_hint(hint: Any) -> dict[str, Any]:
    inner, optional = _split_optional(hint)
    schema = _schema_of_type(inner)
    if optional:
        if "type" in schema:
            kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            schema = {**schema, "type": [*kinds, "null"]}
        elif "enum" in schema:
            schema = {**schema, "enum": [*schema["enum"], None]}
        else:
            schema = {"anyOf": [schema, {"type": "null"}]}
    return schema


def _schema_of_type(hint: Any) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return {"enum": list(typing.get_args(hint))}
    if origin in (tuple, list):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return {"type": "array", "items": _schema_of_hint(args[0]) if args else {}}
    if origin in (dict, Mapping):
        return {"type": "object"}
    if dataclasses.is_dataclass(hint):
        return schema_of(hint)
    simple = {bool: "boolean", int: "integer", float: "number", str: "string", Path: "string"}
    if hint in simple:
        return {"type": simple[hint]}
    return {}


def schema_of(cls: type, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """JSON Schema (types and choices) of the config-file form of an options class.

    Ranges are checked by the class itself (`__post_init__`), so there is one place for them.
    """
    hints = _hints(cls)
    properties = {f.name: _schema_of_hint(hints[f.name]) for f in config_fields(cls)}
    properties.update(extra or {})
    return {"type": "object", "additionalProperties": False, "properties": properties}


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def option_field(cls: type, name: str) -> dataclasses.Field:
    """The field of option `name` of an options class."""
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def default_of(cls: type, name: str) -> Any:
    """The default of option `name` (the CLI's default)."""
    return _default(option_field(cls, name))


def help_of(cls: type, name: str) -> str | None:
    """The help option `name` declares (None: it declares none)."""
    return option_field(cls, name).metadata.get(HELP)


def flag_of(cls: type, name: str) -> str:
    """The command-line flag of option `name`: its own, else `--<name>` (`max_tokens` ->
    `--max-tokens`)."""
    return option_field(cls, name).metadata.get(FLAG) or "--" + name.replace("_", "-")


def defaults_of(cls: type) -> dict[str, Any]:
    """The JSON form of every config-file field's default (what docs/build.md lists)."""
    out = {}
    for field in config_fields(cls):
        value = _default(field)
        if value is not dataclasses.MISSING:
            out[field.name] = to_jsonable(value)
    return out


def _convert(value: Any, hint: Any, option: str, base: Path | None) -> Any:
    inner, optional = _split_optional(hint)
    if value is None:
        if not optional:
            raise OptionError(option, "must not be null")
        return None
    origin = typing.get_origin(inner)
    if origin in (tuple, list) and isinstance(value, (list, tuple)):
        args = [a for a in typing.get_args(inner) if a is not Ellipsis]
        item = args[0] if args else Any
        return tuple(_convert(v, item, f"{option}[{i}]", base) for i, v in enumerate(value))
    if dataclasses.is_dataclass(inner) and isinstance(value, Mapping):
        return from_mapping(inner, value, base=base, option=option)
    if inner is Path and isinstance(value, str):
        path = Path(value).expanduser()
        return (base / path).resolve() if base is not None and not path.is_absolute() else path
    if inner is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def values_from_mapping(
    cls: type, data: Mapping[str, Any], *, base: Path | None = None, option: str = ""
) -> dict[str, Any]:
    """The typed field values a config mapping gives (no defaults added, nothing constructed).

    Raises:
        OptionError: an unknown key or a null where none is allowed.
    """
    hints = _hints(cls)
    allowed = {f.name for f in config_fields(cls)}
    values: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{option}.{key}" if option else str(key)
        if key not in allowed:
            raise OptionError(where, f"unknown option (known: {', '.join(sorted(allowed))})")
        values[key] = _convert(value, hints[key], where, base)
    return values


def from_mapping(
    cls: type,
    data: Mapping[str, Any],
    *,
    base: Path | None = None,
    fixed: Mapping[str, Any] | None = None,
    option: str = "",
) -> Any:
    """Options from a config mapping: lists become tuples, paths resolve against `base`, nested
    mappings become nested options, `fixed` sets what the config may not (output paths).

    Raises:
        OptionError: an unknown key, a wrong type, or a value the class refuses (named by its
            key path, e.g. `thresholds.max_mean_kl`).
    """
    values = values_from_mapping(cls, data, base=base, option=option)
    try:
        return cls(**values, **(fixed or {}))
    except OptionError as exc:
        raise (exc.nested(option) if option else exc) from None


def to_jsonable(value: Any) -> Any:
    """Paths as strings, tuples as lists, dataclasses as dicts: what JSON output is made of."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    return value
