"""Prompt sets: a JSONL file, one object per line with a non-empty "prompt" string.

Optional fields: "id" (a non-empty string or a number, unique; default line-N), "task" (a
string, used to group results); anything else is kept.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from copilot_cli.core.errors import InputError
from copilot_cli.core.inputs import decode_utf8, parse_json, read_bytes


def load_prompts(path: Path) -> list[dict[str, Any]]:
    """Prompts from a JSONL file, each line checked (errors name the file and line)."""
    if not Path(path).is_file():
        raise InputError("prompts file does not exist", where=str(path))
    data, name = read_bytes(path, "prompts file")
    prompts = []
    seen: dict[str, int] = {}
    for number, line in enumerate(decode_utf8(data, name).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        item = _checked(parse_json(line, where), where, number)
        if item["id"] in seen:
            raise InputError(
                f"id {item['id']!r} is also used on line {seen[item['id']]}", where=where
            )
        seen[item["id"]] = number
        prompts.append(item)
    if not prompts:
        raise InputError("no prompts", where=str(path))
    return prompts


def _checked(item: Any, where: str, number: int) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise InputError('each line must be an object with a "prompt" string', where=where)
    prompt = item.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError('"prompt" must be a string with text in it', where=where)
    raw_id = item.get("id", f"line-{number}")
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)) or raw_id == "":
        raise InputError('"id" must be a non-empty string or a number', where=where)
    task = item.get("task", "all")
    if not isinstance(task, str) or not task:
        raise InputError('"task" must be a non-empty string', where=where)
    return {**item, "id": str(raw_id), "task": task}


def prompts_hash(prompts: list[dict[str, Any]]) -> str:
    """sha256 over the prompts' ids and texts (what a baseline was computed on)."""
    digest = hashlib.sha256()
    for item in prompts:
        digest.update(json.dumps([item["id"], item["prompt"]], ensure_ascii=False).encode())
    return digest.hexdigest()
