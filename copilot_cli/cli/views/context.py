"""The chosen context: written as JSON / JSONL / text, summarised on stderr."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from copilot_cli.cli.common import note
from copilot_cli.core.artifacts import write_bytes
from copilot_cli.core.outputs import claim_file, remember_written


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_out(
    out: Path | None, result: Any, text: str | None, batch: bool, inputs: list[Path]
) -> None:
    """-o gets the request JSON (one request), JSONL (a batch) or the overview text (--static);
    without -o they go to stdout. An existing -o is replaced only if this command wrote it
    (and never when it is one of the run's inputs)."""

    if batch:
        data = "".join(
            json.dumps(r.to_dict(), sort_keys=True, ensure_ascii=False) + "\n" for r in result
        )
    else:
        data = text if text is not None else _json(result.to_dict())
    if out is None:
        sys.stdout.write(data)
        return
    claim_file(out, "out", label="context", inputs=inputs)
    write_bytes(out, data.encode("utf-8"))
    remember_written(out)


def show_context(result: Any, out: Path | None, batch: bool) -> None:
    """One line on stderr: a batch's, an overview's or one request's summary."""
    if batch:
        tokens = sum(r.tokens for r in result)
        note(
            f"{len(result)} requests, {tokens} context tokens in all"
            + (f" -> {out}" if out else "")
        )
    elif hasattr(result, "entries"):
        note(f"overview: {len(result.entries)} definitions, {result.tokens} tokens")
    else:
        note(
            f"{len(result.snippets)} snippets, {result.tokens}/{result.budget} tokens "
            f"({result.format}), from {result.candidates} candidates"
        )
