"""YAML config files checked against a JSON Schema, with errors that name the key and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

from copilot_cli.core.errors import InputError


def _line_of(node: yaml.Node, path: list[Any]) -> int | None:
    """1-based line of the YAML node at `path` (the deepest one that exists)."""
    line = node.start_mark.line + 1
    for key in path:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == key), None)
            if match is None:
                break
            line = match[0].start_mark.line + 1
            node = match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            break
    return line


MAX_VALUES = 100_000  # a config file expands to at most this many values (aliases counted)


def _expanded_size(node: yaml.Node, memo: dict[int, int], limit: int) -> int:
    """How many values `node` stands for once every alias is expanded (stops past `limit`)."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = limit + 1  # a cycle counts as too large
    total = 1
    children = node.value if isinstance(node.value, list) else []
    for child in children:
        for part in child if isinstance(child, tuple) else (child,):
            total += _expanded_size(part, memo, limit)
            if total > limit:
                memo[key] = total
                return total
    memo[key] = total
    return total


def _check_nodes(node: yaml.Node, where: Path) -> None:
    """Refuse alias bombs and duplicate keys before anything is built from the file."""
    if _expanded_size(node, {}, MAX_VALUES) > MAX_VALUES:
        raise InputError(
            f"expands to more than {MAX_VALUES:,} values (YAML aliases): refused", where=str(where)
        )
    stack = [node]
    seen: set[int] = set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, yaml.MappingNode):
            keys: dict[Any, int] = {}
            for key_node, value_node in current.value:
                label = key_node.value if isinstance(key_node, yaml.ScalarNode) else id(key_node)
                line = key_node.start_mark.line + 1
                if label in keys:
                    raise InputError(
                        f"key {label!r} is given twice (also on line {keys[label]})",
                        where=f"{where}:{line}",
                    )
                keys[label] = line
                stack.extend((key_node, value_node))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)


def load_config(path: Path, schema: dict[str, Any]) -> dict[str, Any]:
    """Read `path` as YAML and validate it; InputError names the key path and its line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("config file does not exist", where=str(path)) from None
    except UnicodeDecodeError as exc:
        raise InputError(
            f"not UTF-8: byte {exc.start} cannot be decoded", where=str(path)
        ) from None
    except OSError as exc:
        raise InputError(f"cannot read the config ({exc.strerror})", where=str(path)) from None
    try:
        node = yaml.compose(text)
        if node is not None:
            _check_nodes(node, path)
        data = yaml.safe_load(text)
    except RecursionError:
        raise InputError("nested too deeply", where=str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise InputError(f"not valid YAML: {getattr(exc, 'problem', exc)}", where=where) from exc
    data = {} if data is None else data
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        error = jsonschema.exceptions.best_match(errors)
        keys = list(error.absolute_path)
        if error.validator == "additionalProperties":
            extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
            keys = [*keys, extra[0]] if extra else keys
            message = f"unknown key {extra[0]!r}" if extra else error.message
        else:
            message = error.message
        key_text = ".".join(str(k) for k in keys) or "(top level)"
        line = _line_of(node, keys) if node is not None else None
        raise InputError(f"{key_text}: {message}", where=f"{path}:{line}" if line else str(path))
    return data
