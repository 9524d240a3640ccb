"""The current file's imports, resolved to files of the repository the chunks describe.

Per language, what is imported (a module, and the names taken from it) is read with a regular
expression over the text before and after the cursor; a module is resolved against the
repository's paths: Python dotted modules (`a.b` -> a/b.py, a/b/__init__.py, also under a
source root such as src/), relative imports (`.x`, `./x`) from the current file's folder,
JavaScript/TypeScript specifiers with their extensions and index files, Go import paths by
their package folder, Rust `crate::`/`super::` paths, Java/Kotlin classes by their path.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

_PY_FROM = re.compile(r"^\s*from\s+(\.*[\w.]*)\s+import\s+\(?([^)\n]*)", re.M)
_PY_IMPORT = re.compile(r"^\s*import\s+([\w., ]+)", re.M)
_JS = re.compile(
    r"""(?:import\s+(?:([\w*{}\s,$]+?)\s+from\s+)?|require\s*\(\s*|import\s*\(\s*)['"]([^'"]+)['"]"""
)
_GO_BLOCK = re.compile(r"^import\s*\(([^)]*)\)", re.M)
_GO_ONE = re.compile(r'^import\s+(?:[\w.]+\s+)?"([^"]+)"', re.M)
_GO_PATH = re.compile(r'"([^"]+)"')
_RUST = re.compile(r"^\s*(?:pub\s+)?use\s+([\w:]+)(?:::\{([^}]*)\})?", re.M)
_RUST_MOD = re.compile(r"^\s*(?:pub\s+)?mod\s+(\w+)\s*;", re.M)
_JAVA = re.compile(r"^\s*import\s+(?:static\s+)?([\w.]+)(?:\.\*)?\s*;", re.M)
_NAME = re.compile(r"[A-Za-z_$][\w$]*")
JS_EXTENSIONS = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs", ".d.ts")


def imports_of(text: str, language: str | None) -> list[tuple[str, tuple[str, ...]]]:
    """(module spec, names taken from it) for each import in `text`."""
    found: list[tuple[str, tuple[str, ...]]] = []
    if language == "python":
        for module, names in _PY_FROM.findall(text):
            taken = tuple(n for n in _NAME.findall(names) if n != "as")
            found.append((module, taken))
            found += [(f"{module}.{n}" if module.strip(".") else module + n, ()) for n in taken]
        for modules in _PY_IMPORT.findall(text):
            found += [(m.split()[0], ()) for m in modules.split(",") if m.strip()]
    elif language in ("javascript", "typescript", "tsx"):
        for names, spec in _JS.findall(text):
            found.append((spec, tuple(n for n in _NAME.findall(names or "") if n != "as")))
    elif language == "go":
        blocks = _GO_BLOCK.findall(text)
        found += [(p, ()) for block in blocks for p in _GO_PATH.findall(block)]
        found += [(p, ()) for p in _GO_ONE.findall(text)]
    elif language == "rust":
        for path, names in _RUST.findall(text):
            found.append((path, tuple(_NAME.findall(names))))
        found += [(f"self::{m}", ()) for m in _RUST_MOD.findall(text)]
    elif language in ("java", "kotlin"):
        found += [(m, (m.rsplit(".", 1)[-1],)) for m in _JAVA.findall(text)]
    return found


def resolve(
    spec: str, language: str | None, current: str, files: dict[str, list[int]]
) -> list[str]:
    """Paths of `files` that `spec`, imported from `current`, names (possibly several: a Go
    package is a folder)."""
    folder = PurePosixPath(current).parent
    if language == "python":
        return _python(spec, folder, files)
    if language in ("javascript", "typescript", "tsx"):
        if not spec.startswith("."):
            return []
        base = _normal(folder / spec)
        candidates = [base, *(base + e for e in JS_EXTENSIONS)]
        candidates += [f"{base}/index{e}" for e in JS_EXTENSIONS]
        return [c for c in candidates if c in files][:1]
    if language == "go":
        return _by_folder_suffix(spec.strip("/"), ".go", files)
    if language == "rust":
        return _rust(spec, folder, files)
    if language in ("java", "kotlin"):
        tail = spec.replace(".", "/")
        return [p for p in files if p.endswith((f"{tail}.java", f"{tail}.kt"))][:1]
    return []


def _normal(path: PurePosixPath) -> str:
    parts: list[str] = []
    for part in path.parts:
        if part == "..":
            if parts:
                parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts)


def _python(spec: str, folder: PurePosixPath, files: dict[str, list[int]]) -> list[str]:
    dots = len(spec) - len(spec.lstrip("."))
    rest = spec[dots:].replace(".", "/")
    if dots:
        base = folder
        for _ in range(dots - 1):
            base = base.parent
        stems = [_normal(base / rest) if rest else _normal(base)]
    else:
        stems = [rest]
    for stem in stems:
        for candidate in (f"{stem}.py", f"{stem}/__init__.py"):
            if candidate in files:
                return [candidate]
        if not dots:  # a source root: src/a/b.py, lib/a/b.py
            for candidate in files:
                if candidate.endswith((f"/{stem}.py", f"/{stem}/__init__.py")):
                    return [candidate]
    return []


def _by_folder_suffix(spec: str, suffix: str, files: dict[str, list[int]]) -> list[str]:
    """Files directly in the folder whose path ends the import path the longest way."""
    parts = spec.split("/")
    for start in range(len(parts)):
        tail = "/".join(parts[start:])
        hits = [
            p
            for p in files
            if p.endswith(suffix)
            and not p.endswith("_test.go")
            and (
                str(PurePosixPath(p).parent) == tail
                or str(PurePosixPath(p).parent).endswith("/" + tail)
            )
        ]
        if hits:
            return sorted(hits)
    return []


def _rust(spec: str, folder: PurePosixPath, files: dict[str, list[int]]) -> list[str]:
    parts = spec.split("::")
    head, rest = parts[0], parts[1:]
    if head == "crate":
        roots = sorted(
            {str(PurePosixPath(p).parent) for p in files if p.endswith(("lib.rs", "main.rs"))}
        )
    elif head in ("self", "super"):
        roots = [str(folder if head == "self" else folder.parent)]
    else:
        return []
    for root in roots:
        for end in range(len(rest), 0, -1):
            stem = "/".join([root, *rest[:end]]) if root != "." else "/".join(rest[:end])
            for candidate in (f"{stem}.rs", f"{stem}/mod.rs"):
                if candidate in files:
                    return [candidate]
    return []
