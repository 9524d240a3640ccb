"""Template input schemas: the one loader and validator, which never leaves the schema's own
document and never runs a pattern without a bound.

A `$ref` (or `$dynamicRef`, `$recursiveRef`) must point into the schema itself (`#...`); an
`$id` cannot rename it to a URI: validating inputs never opens a network connection or a file
(jsonschema would fetch `http://` references, fastjsonschema `http://` and `file://` ones).
Every `pattern` and `patternProperties` key runs in `core.regexes` (linear-time RE2, or a
deadline), never in Python's backtracking `re`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
from referencing import Registry
from referencing.exceptions import NoSuchResource

from copilot_cli.core import lazy
from copilot_cli.core.regexes import bounded

fastjsonschema = lazy.module("fastjsonschema")

REFERENCE_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")
# keywords whose value maps names to subschemas (the names are data, not keywords)
_NAMED_SUBSCHEMAS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
# keywords whose value is data, never a schema
_DATA = ("enum", "const", "default", "examples")
MAX_DEPTH = 200
PATTERN_WHERE = "inputs schema pattern"


class SchemaRefused(ValueError):
    """A schema construct that could reach outside the document or run unbounded."""


def check_schema(schema: Any) -> None:
    """Refuse references out of the document, URI `$id`s, uncompilable patterns, and
    `unevaluatedProperties` beside `patternProperties` (jsonschema matches those with `re`).

    Raises:
        SchemaRefused: naming the construct (the caller adds the file).
    """
    keywords: set[str] = set()
    for node in _schema_nodes(schema):
        keywords.update(node)
        for key in REFERENCE_KEYS:
            ref = node.get(key)
            if key in node and not (isinstance(ref, str) and ref.startswith("#")):
                raise SchemaRefused(
                    f"{key} {str(ref)[:200]!r} points outside the schema; only references "
                    "within it (#/...) are allowed: nothing is fetched"
                )
        for key in ("$id", "id"):
            value = node.get(key)
            if isinstance(value, str) and not value.startswith("#"):
                raise SchemaRefused(f"{key} {value[:200]!r}: an input schema cannot name a URI")
        patterns = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        if isinstance(node.get("patternProperties"), dict):
            patterns += list(node["patternProperties"])
        for pattern in patterns:
            bounded(pattern, PATTERN_WHERE)
    if "unevaluatedProperties" in keywords and "patternProperties" in keywords:
        raise SchemaRefused("unevaluatedProperties cannot be combined with patternProperties")


def _schema_nodes(schema: Any) -> Iterator[dict[str, Any]]:
    """Every object in a schema position, iteratively (a deep schema is no RecursionError)."""
    stack: list[tuple[Any, int]] = [(schema, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SchemaRefused(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, list):
            stack.extend((item, depth + 1) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        yield node
        for key, value in node.items():
            if key in _DATA:
                continue
            if key in _NAMED_SUBSCHEMAS and isinstance(value, dict):
                stack.extend((sub, depth + 1) for sub in value.values())
            elif isinstance(value, (dict, list)):
                stack.append((value, depth + 1))


def _refuse_retrieval(uri: str) -> Any:
    raise NoSuchResource(ref=uri)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not bounded(pattern, PATTERN_WHERE).search(
        instance
    ):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, value: dict, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in value.items():
        regex = bounded(pattern, PATTERN_WHERE)
        for name, item in instance.items():
            if regex.search(name):
                yield from validator.descend(item, subschema, path=name, schema_path=pattern)


def _additional_properties(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    known = schema.get("properties", {})
    patterns = [bounded(p, PATTERN_WHERE) for p in schema.get("patternProperties", {})]
    extras = [n for n in instance if n not in known and not any(r.search(n) for r in patterns)]
    if validator.is_type(value, "object"):
        for name in extras:
            yield from validator.descend(instance[name], value, path=name)
    elif not value and extras:
        names = ", ".join(repr(n) for n in sorted(extras)[:5])
        yield jsonschema.ValidationError(f"Additional properties are not allowed ({names})")


@functools.cache
def _bounded_class(base: type) -> type:
    """`base` with every keyword that matches a pattern running it through `core.regexes`."""
    return jsonschema.validators.extend(
        base,
        {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
        },
    )


def make_validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    """A jsonschema validator that resolves nothing outside `schema` and bounds patterns."""
    check_schema(schema)
    cls = _bounded_class(jsonschema.validators.validator_for(schema))
    return cls(
        schema,
        format_checker=cls.FORMAT_CHECKER,
        registry=Registry(retrieve=_refuse_retrieval),  # type: ignore[call-arg]
    )


def fast_validator(schema: dict[str, Any]) -> Any:
    """A compiled accept-check (fastjsonschema generates Python code for the schema).

    Used as the fast path; on rejection `jsonschema` produces the error with its JSON path.
    Schemas fastjsonschema cannot compile, or that hold patterns (it would run them in `re`),
    use jsonschema alone. (fastjsonschema escapes every schema string it puts into the code it
    generates, so a schema edited into a bundle changes what is accepted, never what runs.)
    """
    check_schema(schema)
    try:
        if any("pattern" in n or "patternProperties" in n for n in _schema_nodes(schema)):
            raise ValueError("patterns run bounded, in jsonschema")
        check = fastjsonschema.compile(schema, use_default=False, handlers=_NO_HANDLERS)
    except Exception:  # unsupported keyword or draft: the slow path still validates
        validator = make_validator(schema)
        return lambda inputs: validator.is_valid(dict(inputs))

    def accepts(inputs: Mapping[str, Any]) -> bool:
        try:
            check(inputs if isinstance(inputs, dict) else dict(inputs))
        except fastjsonschema.JsonSchemaException:
            return False
        return True

    return accepts


def _no_fetch(uri: str) -> Any:
    raise ValueError(f"{uri}: input schemas are never fetched")


_NO_HANDLERS = {scheme: _no_fetch for scheme in ("http", "https", "file", "ftp", "")}


def first_schema_error(validator: Any, inputs: Any) -> jsonschema.ValidationError | None:
    errors = list(validator.iter_errors(inputs))
    return jsonschema.exceptions.best_match(errors) if errors else None


def json_path(error: jsonschema.ValidationError) -> str:
    """`$.a[2].b` for a validation error's location."""
    text = "$"
    for part in error.absolute_path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def with_defaults(schema: dict[str, Any], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """`inputs` plus the schema's top-level `default` values for properties not given."""
    values = dict(inputs)
    for key, spec in (schema.get("properties") or {}).items():
        if key not in values and isinstance(spec, dict) and "default" in spec:
            values[key] = spec["default"]
    return values
