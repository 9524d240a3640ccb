"""What a quantized-embeddings folder or file holds, verified (for `copilot-opt inspect`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from copilot_cli.core.errors import ArtifactError
from copilot_cli.core.inspection import Expected, Inspection, Problem, checked, unreadable
from copilot_cli.core.safetensors_io import read_header, read_verified, tensor_view
from copilot_cli.quant.ct_export import WEIGHTS, stored_tensors
from copilot_cli.quant.exports import CT_FOLDER, GGUF_NAME
from copilot_cli.quant.format import FILENAME, read
from copilot_cli.quant.gguf_export import inspect_export

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
    parts: list[Inspection] = []
    if verify:
        tables = checked(
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
            if (path / CT_FOLDER).is_dir():
                _check_checkpoint(path / CT_FOLDER, tables, problems)
    if path.is_dir():
        info["exports"] = [n for n in (GGUF_NAME, CT_FOLDER) if (path / n).exists()]
        if (path / GGUF_NAME).is_file():
            parts.append(inspect_gguf_export(path / GGUF_NAME, verify=verify))
    return Inspection(str(path), "quantized-embeddings", info, verify, problems, parts)


def inspect_gguf_export(
    path: Path, *, verify: bool = True, expected: Expected | None = None
) -> Inspection:
    """A quantize --export gguf file: its scheme, source and replaced tensors (types, bytes
    before and after); verified, each replaced tensor's bytes against the sha256 recorded
    when it was written (a GGUF whose embedding was replaced by anything else is refused)."""
    info, found = inspect_export(path, verify)
    problems = [Problem(str(path), problem) for problem in found]
    return Inspection(str(path), "gguf-export", info, verify, problems)


def _check_checkpoint(folder: Path, tables: Any, problems: list[Problem]) -> None:
    """A compressed-tensors export: its weights file whole (digest), its config naming the
    scheme, and its embedding tensors exactly the table beside it."""

    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        if config["quantization_config"]["quant_method"] != "compressed-tensors":
            raise ValueError("no compressed-tensors quantization_config")
        header, _, buffer, start = read_verified(folder / WEIGHTS)
    except (OSError, ValueError, KeyError, TypeError, ArtifactError) as exc:
        message = exc.message if isinstance(exc, ArtifactError) else f"{type(exc).__name__}: {exc}"
        problems.append(Problem(str(folder), f"not a whole export ({message})"))
        return
    if not tables:
        return
    wanted = stored_tensors(_embed_prefix(header), tables[0]["embed"].table)
    for name, tensor in wanted.items():
        stored = tensor_view(buffer, start, header[name]) if name in header else None
        if stored is None or not torch.equal(stored, tensor):
            problems.append(Problem(str(folder / WEIGHTS), f"{name} is not the quantized table"))
            return


def _embed_prefix(header: dict[str, Any]) -> str:
    names = [n for n in header if n.endswith(".weight_scale")]
    return next((n.removesuffix(".weight_scale") for n in names if "embed" in n), "")


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
