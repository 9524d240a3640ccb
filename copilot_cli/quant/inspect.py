"""What a quantized-embeddings folder or file holds, verified (for `copilot-opt inspect`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from copilot_cli.core.errors import ArtifactError
from copilot_cli.core.inspection import Expected, Inspection, Problem, checked, unreadable
from copilot_cli.core.safetensors_io import read_header
from copilot_cli.quant.format import FILENAME, read

REPORT = "report.json"
_DESCRIBED = (
    "format",
    "format_version",
    "scheme",
    "bits",
    "group_size",
    "vocab_size",
    "hidden_size",
    "kept_rows",
    "model_fingerprint",
    "tokenizer_fingerprint",
)


def inspect_quantized(
    path: Path, *, verify: bool = True, expected: Expected | None = None
) -> Inspection:
    """`path`: a quantize output folder (embeddings + report.json) or the embeddings file.

    Verified: every byte of the table (digest), its tensors against the scheme, the
    fingerprints (with a model), and that report.json describes this table."""
    expected = expected or Expected()
    file = path / FILENAME if path.is_dir() else path
    try:
        header, metadata = read_header(file)
    except ArtifactError as exc:
        return unreadable(str(path), "quantized-embeddings", str(file), exc, verify=verify)
    info: dict[str, Any] = {key: metadata.get(key) for key in _DESCRIBED}
    info.update(tables=sorted({name.split(".")[0] for name in header}), bytes=file.stat().st_size)
    problems: list[Problem] = []
    if verify:
        checked(
            problems,
            str(file),
            lambda: read(
                file,
                model_fingerprint=expected.model_fingerprint,
                tokenizer_fingerprint=expected.tokenizer_fingerprint,
            ),
        )
        if path.is_dir():
            _check_report(path / REPORT, metadata, problems)
    return Inspection(str(path), "quantized-embeddings", info, verify, problems)


def _check_report(report: Path, metadata: dict[str, str], problems: list[Problem]) -> None:
    """The report must be about the table beside it (a half-replaced folder is caught)."""
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
        found = {key: str(data[key]) for key in ("bits", "vocab_size", "hidden_size", "kept_rows")}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        problems.append(Problem(str(report), f"unreadable ({type(exc).__name__}: {exc})"))
        return
    table = {key: metadata.get(key) for key in found}
    if found != table:
        problems.append(Problem(str(report), f"describes another table ({found} vs {table})"))
