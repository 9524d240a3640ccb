"""Prompt sets: a JSONL file, one object per line with a non-empty "prompt" string.

Optional fields: "id" (a non-empty string or a number, unique; default line-N), "task" (a
string, used to group results); anything else is kept (`PromptCase.extra`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from copilot_cli.core.errors import InputError
from copilot_cli.core.inputs import decode_utf8, parse_json, read_bytes


@dataclass(frozen=True)
class PromptCase:
    """One prompt of a set, checked once when the file is read.

    Attributes:
        id: unique within the set (a number in the file becomes its text; default line-N).
        prompt: the text, never empty.
        task: what results are grouped by ("all" when the line names none).
        extra: the line's other fields, kept as they were.
    """

    id: str
    prompt: str
    task: str = "all"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**self.extra, "id": self.id, "prompt": self.prompt, "task": self.task}


def load_prompts(path: Path) -> list[PromptCase]:
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
        if item.id in seen:
            raise InputError(f"id {item.id!r} is also used on line {seen[item.id]}", where=where)
        seen[item.id] = number
        prompts.append(item)
    if not prompts:
        raise InputError("no prompts", where=str(path))
    return prompts


def _checked(item: Any, where: str, number: int) -> PromptCase:
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
    extra = {k: v for k, v in item.items() if k not in ("id", "prompt", "task")}
    return PromptCase(str(raw_id), prompt, task, extra)


def prompts_hash(prompts: list[PromptCase]) -> str:
    """sha256 over the prompts' ids and texts (what a baseline was computed on)."""
    digest = hashlib.sha256()
    for item in prompts:
        digest.update(json.dumps([item.id, item.prompt], ensure_ascii=False).encode())
    return digest.hexdigest()
