"""Prompt sets: a JSONL file, one object per line with a non-empty "prompt" string.

Optional fields: "id" (default line-N), "task" (used to group results), anything else is kept.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from copilot_cli.core.errors import InputError


def load_prompts(path: Path) -> list[dict[str, Any]]:
    """Prompts from a JSONL file: one object per line with a non-empty "prompt" string."""
    if not path.is_file():
        raise InputError("prompts file does not exist", where=str(path))
    prompts = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise InputError(f"not valid JSON ({exc.msg})", where=f"{path}:{number}") from exc
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("prompt"), str)
            or not item["prompt"]
        ):
            raise InputError(
                'each line must be an object with a non-empty "prompt" string',
                where=f"{path}:{number}",
            )
        item.setdefault("id", f"line-{number}")
        prompts.append(item)
    if not prompts:
        raise InputError("no prompts", where=str(path))
    return prompts


def prompts_hash(prompts: list[dict[str, Any]]) -> str:
    """sha256 over the prompts' ids and texts (what a baseline was computed on)."""
    digest = hashlib.sha256()
    for item in prompts:
        digest.update(json.dumps([item["id"], item["prompt"]], ensure_ascii=False).encode())
    return digest.hexdigest()
