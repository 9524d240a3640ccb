"""build/build-manifest.json: what each step produced, from which inputs, and the verdict."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from copilot_cli import __version__
from copilot_cli.core.artifacts import canonical_json, json_digest, sealed, write_bytes
from copilot_cli.core.fingerprints import FileHashCache

FORMAT = "copilot-opt.build-manifest"
FORMAT_VERSION = 3  # 2: sealed by a digest; 3: outputs keyed by their path in the build folder
NAME = "build-manifest.json"
_cache = FileHashCache()


def file_sha(path: Path) -> str:
    return _cache.sha256(path)


def tree_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under `root` (or of `root` itself), by relative path."""
    if root.is_file():
        return {root.name: file_sha(root)}
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.startswith(".") and "__pycache__" not in path.parts:
            out[path.relative_to(root).as_posix()] = file_sha(path)
    return out


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


class Manifest:
    """The build's record. One that does not match its digest (edited or damaged) is not
    trusted: the build starts from nothing and says so (`warning`)."""

    def __init__(self, out: Path) -> None:
        self.path = out / NAME
        self.warning: str | None = None
        self.data: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "steps": {},
            "verdict": None,
        }
        try:
            loaded = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            loaded = None
            if self.path.exists():
                self.warning = f"{self.path} is unreadable: every step runs again"
        if loaded is not None and (not isinstance(loaded, dict) or loaded.get("format") != FORMAT):
            self.warning = f"{self.path} is not a build manifest (damaged?): every step runs again"
        elif isinstance(loaded, dict) and loaded.get("format") == FORMAT:
            if loaded.get("format_version") != FORMAT_VERSION:
                self.warning = (
                    f"{self.path} was written by another version of copilot-opt "
                    f"(format {loaded.get('format_version')!r}): every step runs again"
                )
            elif loaded.get("digest") != json_digest(loaded):
                self.warning = f"{self.path} was edited or is damaged: every step runs again"
            elif isinstance(loaded.get("steps"), dict):
                self.data = {k: v for k, v in loaded.items() if k != "digest"}

    def step(self, name: str) -> dict[str, Any] | None:
        return self.data["steps"].get(name)

    def record(self, name: str, entry: dict[str, Any]) -> None:
        self.data["steps"][name] = entry
        self.save()

    def save(self) -> None:
        self.data["copilot_opt_version"] = __version__
        write_bytes(self.path, canonical_json(sealed(self.data)).encode("utf-8"))
