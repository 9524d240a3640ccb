"""Template files: YAML front matter (name, description, version, inputs, samples, format) + body.

A template file looks like:

    ---
    name: code-completion
    description: Complete the code at the cursor.
    version: 1.2.0
    format: text            # or chat
    inputs:                 # a JSON Schema for the variables
      type: object
      required: [code]
      properties:
        code: {type: string}
    samples:
      - {code: "def f():"}
    ---
    {% include "parts/role.j2" %}
    ...

Files under a `parts/` folder are parts: bodies only (no front matter), shared by templates
through `{% include %}` or `{% extends %}`, versioned and swapped on their own.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from copilot_cli.core.errors import InputError
from copilot_cli.prompts.errors import TemplateError
from copilot_cli.prompts.schema import SchemaRefused, check_schema

FRONT_MATTER_KEYS = {"name", "description", "version", "inputs", "samples", "format"}
REQUIRED_KEYS = ("name", "description", "version", "inputs")
FORMATS = ("text", "chat")
PARTS_DIR = "parts"


@dataclass(frozen=True)
class TemplateSource:
    """One template file, parsed but not compiled."""

    name: str
    rel_path: str  # path relative to the template folder, with forward slashes
    description: str
    version: str
    schema: dict[str, Any]
    samples: list[dict[str, Any]]
    format: str
    body: str
    body_line: int  # 1-based line of the file where the body starts
    raw: bytes = field(repr=False)


def read_text(path: Path, rel: str) -> str:
    if path.exists() and not path.is_file():  # a FIFO would block, a device never end
        raise TemplateError("not a regular file (a pipe, device or socket)", file=rel)
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TemplateError(
            f"not UTF-8 (byte {exc.start}: {exc.reason}); save it as UTF-8", file=rel
        ) from exc
    except OSError as exc:
        raise TemplateError(f"cannot read ({exc.strerror})", file=rel) from exc


def split_front_matter(text: str, rel: str) -> tuple[str, str, int]:
    """(front matter YAML, body, body start line). The file must start with a `---` line."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise TemplateError(
            "a template must start with YAML front matter ('---')", file=rel, line=1
        )
    for index in range(1, len(lines)):
        if lines[index].strip() == "---":
            return "".join(lines[1:index]), "".join(lines[index + 1 :]), index + 2
    raise TemplateError("front matter is not closed by a '---' line", file=rel, line=1)


# A template's name becomes a file name (build writes context/REPO/NAME.txt, prefill-kv names
# prefixes by it): letters, digits, '-', '_' and '.', starting with a letter or digit, so no
# name can be a path (no separator, no '..', nothing absolute).
TEMPLATE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


def template_name_problem(name: object) -> str | None:
    """Why `name` cannot be a template's name (None: it can)."""
    if not isinstance(name, str) or not TEMPLATE_NAME.fullmatch(name) or ".." in name:
        return (
            f"{name!r} is not a template name: use letters, digits, '-', '_' and '.' "
            "(starting with a letter or digit, no '..', at most 100 characters)"
        )
    return None


def _check_field_types(meta: dict[str, Any], rel: str) -> None:
    unknown = sorted(set(meta) - FRONT_MATTER_KEYS)
    if unknown:
        raise TemplateError(
            f"unknown front matter key {unknown[0]!r} (known: "
            f"{', '.join(sorted(FRONT_MATTER_KEYS))})",
            file=rel,
        )
    for key in REQUIRED_KEYS:
        if key not in meta:
            raise TemplateError(f"front matter is missing {key!r}", file=rel)
    for key in ("name", "description"):
        if not isinstance(meta[key], str) or not meta[key].strip():
            raise TemplateError(f"{key!r} must be a non-empty string", file=rel)
    if problem := template_name_problem(meta["name"].strip()):
        raise TemplateError(f"'name' {problem}", file=rel)
    if not isinstance(meta["version"], (str, int, float)):
        raise TemplateError("'version' must be a string such as 1.0.0", file=rel)
    if not isinstance(meta["inputs"], dict):
        raise TemplateError("'inputs' must be a JSON Schema object", file=rel)
    if meta.get("format", "text") not in FORMATS:
        raise TemplateError(f"'format' must be one of {', '.join(FORMATS)}", file=rel)
    samples = meta.get("samples", [])
    if not isinstance(samples, list) or not all(isinstance(s, dict) for s in samples):
        raise TemplateError("'samples' must be a list of input objects", file=rel)


def parse_template_file(path: Path, rel: str) -> TemplateSource:
    """Parse one template file's front matter and body; check the schema itself is valid."""
    text = read_text(path, rel)
    front, body, body_line = split_front_matter(text, rel)
    try:
        meta = yaml.safe_load(front) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 2 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise TemplateError(
            f"front matter is not valid YAML: {problem}", file=rel, line=line
        ) from exc
    if not isinstance(meta, dict):
        raise TemplateError("front matter must be a YAML mapping", file=rel, line=2)
    _check_field_types(meta, rel)
    try:
        jsonschema.validators.validator_for(meta["inputs"]).check_schema(meta["inputs"])
        check_schema(meta["inputs"])
    except jsonschema.SchemaError as exc:
        path_text = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise TemplateError(
            f"'inputs' is not a valid JSON Schema at {path_text}: {exc.message}", file=rel
        ) from exc
    except (SchemaRefused, InputError) as exc:
        message = exc.message if isinstance(exc, InputError) else str(exc)
        raise TemplateError(f"'inputs': {message}", file=rel) from None
    return TemplateSource(
        name=meta["name"].strip(),
        rel_path=rel,
        description=meta["description"].strip(),
        version=str(meta["version"]),
        schema=meta["inputs"],
        samples=list(meta.get("samples", [])),
        format=meta.get("format", "text"),
        body=body,
        body_line=body_line,
        raw=path.read_bytes(),
    )


def discover(
    src: Path, links: dict[str, str] | None = None
) -> tuple[list[tuple[Path, str]], list[tuple[Path, str]]]:
    """(template files, part files) under `src`, as (path, relative path), sorted.

    `links`, when given, receives every followed link as relative path -> resolved relative
    path (what was read through it).

    Templates are `*.j2` files outside `parts/`; parts are `*.j2` files inside it. Links are
    followed only while they resolve inside the folder: a file or folder link that leads out
    of it, or a folder link that loops back, is refused naming the link.
    """
    templates, parts = [], []
    root = os.path.realpath(src)
    seen = {_identity(root)}
    stack = [("", root)]
    while stack:
        rel_folder, folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            raise TemplateError(
                f"cannot read folder ({exc.strerror})", file=rel_folder or "."
            ) from exc
        for entry in entries:
            rel = f"{rel_folder}/{entry.name}" if rel_folder else entry.name
            real = os.path.realpath(entry.path)
            if entry.is_symlink():
                if real != root and not real.startswith(root + os.sep):
                    raise TemplateError(
                        "is a link that resolves outside the template folder", file=rel
                    )
                if links is not None:
                    links[rel] = os.path.relpath(real, root).replace(os.sep, "/")
            if entry.is_dir():
                identity = _identity(real)
                if identity in seen:
                    raise TemplateError("is a link that loops back into the folder", file=rel)
                seen.add(identity)
                stack.append((rel, real))
            elif entry.name.endswith(".j2") and entry.is_file():
                kind = parts if rel.split("/")[0] == PARTS_DIR else templates
                kind.append((Path(entry.path), rel))
    return sorted(templates, key=lambda t: t[1]), sorted(parts, key=lambda t: t[1])


def _identity(path: str) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino
