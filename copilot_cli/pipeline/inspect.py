"""`inspect`: any copilot-opt artifact described and verified, or a whole build folder.

The kind is read from the artifact itself (a folder's marker file, a safetensors header's
`format`, a JSON file's `format`), never guessed from a name alone. Each capability verifies
its own artifacts; this module only finds them and, for a build folder, checks the manifest.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from copilot_cli.chunking import inspect_chunks
from copilot_cli.core.artifacts import check_sealed, sha256_file
from copilot_cli.core.errors import ArtifactError, CopilotError, InputError
from copilot_cli.core.inspection import Expected, Inspection, Problem, unreadable
from copilot_cli.core.models import load_model
from copilot_cli.core.modelspec import ModelSpec
from copilot_cli.core.safetensors_io import read_header
from copilot_cli.core.verified import forget_verified
from copilot_cli.kv import (
    inspect_kv_folder,
    inspect_kv_segment,
    inspect_slot_folder,
    model_geometry,
)
from copilot_cli.pipeline.manifest import FORMAT as BUILD_FORMAT
from copilot_cli.pipeline.manifest import FORMAT_VERSION as BUILD_VERSION
from copilot_cli.pipeline.manifest import NAME as BUILD_MANIFEST
from copilot_cli.prompts import inspect_bundle
from copilot_cli.quant import inspect_gguf_export, inspect_quantized
from copilot_cli.regress import inspect_baseline
from copilot_cli.warm import inspect_plan
from copilot_cli.warm.plan import FORMAT as PLAN_FORMAT

Inspector = Callable[..., Inspection]
_BY_SAFETENSORS_FORMAT: dict[str, Inspector] = {
    "copilot-opt.kv-segment": inspect_kv_segment,
    "copilot-opt.quantized-embeddings": inspect_quantized,
    "copilot-opt.regress-baseline": inspect_baseline,
}
_FOLDER_MARKERS: list[tuple[str, Inspector]] = [
    (BUILD_MANIFEST, lambda path, **kw: _inspect_build(path, **kw)),
    ("index.json", inspect_kv_folder),
    ("slots.json", inspect_slot_folder),
    ("manifest.json", inspect_bundle),
    ("embeddings.safetensors", inspect_quantized),
]


def inspect_artifact(
    path: Path, *, verify: bool = True, model: ModelSpec | None = None, loaded: Any = None
) -> Inspection:
    """Describe the artifact at `path`; unless `verify` is False check every byte of it (and,
    with a model, that it was made for that model and tokenizer).

    Raises:
        InputError: `path` does not exist or is no copilot-opt artifact.
        ArtifactError: with verify=False, an artifact too damaged to describe.
    """
    path = Path(path)
    if not path.exists():
        raise InputError("does not exist", where=str(path))
    expected = _expected(model, loaded)
    if verify:
        forget_verified()  # inspect hashes every byte, whatever this process read before
    return _inspector(path)(path, verify=verify, expected=expected)


def _expected(model: ModelSpec | None, loaded: Any) -> Expected:
    if model is None and loaded is None:
        return Expected()

    loaded = loaded or load_model(model)
    return Expected(
        model_fingerprint=loaded.model_fingerprint,
        tokenizer_fingerprint=loaded.tokenizer_fingerprint,
        geometry=model_geometry(loaded.model),
    )


def _inspector(path: Path) -> Inspector:
    if path.is_dir():
        for marker, inspector in _FOLDER_MARKERS:
            if (path / marker).is_file():
                return inspector
        raise InputError(
            "not a copilot-opt artifact folder (no index.json, manifest.json, "
            "embeddings.safetensors or build-manifest.json)",
            where=str(path),
        )
    if path.suffix == ".safetensors":
        try:
            fmt = read_header(path)[1].get("format", "")
        except ArtifactError as exc:  # too damaged to say whose: reported as what it is
            error = exc
            return lambda _path, verify=True, **_: unreadable(
                str(path), "safetensors", str(path), error, verify=verify
            )
        if fmt in _BY_SAFETENSORS_FORMAT:
            return _BY_SAFETENSORS_FORMAT[fmt]
        raise InputError(f"a safetensors file of unknown format {fmt!r}", where=str(path))
    if path.suffix.lower() == ".gguf":
        return inspect_gguf_export
    if path.name in ("index.json", "slots.json", "manifest.json", BUILD_MANIFEST):
        folder = path.parent
        return lambda _path, **kw: _inspector(folder)(folder, **kw)
    if path.suffix == ".json" and _json_format(path) == PLAN_FORMAT:
        return inspect_plan
    if path.suffix in (".jsonl", ".json"):
        return inspect_chunks
    raise InputError(
        "not a copilot-opt artifact (a KV folder or segment, a bundle, quantized "
        "embeddings or their GGUF export, a baseline, chunks, a registry or a build folder)",
        where=str(path),
    )


def _json_format(path: Path) -> str | None:
    """The `format` a JSON file names (None: unreadable, or no object): which reader it needs."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data.get("format") if isinstance(data, dict) else None


def _inspect_build(
    path: Path, *, verify: bool = True, expected: Expected | None = None
) -> Inspection:
    """Every artifact a build folder holds, each verified by its own reader, and the manifest:
    its digest, and the verdict it records."""
    manifest_path = path / BUILD_MANIFEST
    problems: list[Problem] = []
    info: dict[str, Any] = {}
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        if not isinstance(manifest, dict) or manifest.get("format") != BUILD_FORMAT:
            raise ArtifactError("not a build manifest")
        if manifest.get("format_version") != BUILD_VERSION:
            raise ArtifactError(
                f"build manifest format {manifest.get('format_version')!r}, this copilot-opt "
                f"reads {BUILD_VERSION}: build again"
            )
        if verify:
            check_sealed(manifest, where=str(manifest_path))
        info = {"verdict": manifest.get("verdict"), "steps": sorted(manifest.get("steps", {}))}
        if verify:
            problems += _recorded_outputs(path, manifest.get("steps", {}))
    except (OSError, ValueError, RecursionError, CopilotError) as exc:
        problems.append(Problem(str(manifest_path), getattr(exc, "message", None) or str(exc)))
    parts = []
    for sub in _build_parts(path):
        try:
            parts.append(_inspector(sub)(sub, verify=verify, expected=expected))
        except CopilotError as exc:
            problems.append(Problem(str(sub), exc.message))
    return Inspection(str(path), "build", info, verify, problems, parts)


def _recorded_outputs(path: Path, steps: dict[str, Any]) -> list[Problem]:
    """Every file the manifest records a step writing (by its path in the build folder), byte
    for byte: an artifact replaced by another valid one after the build (the verdict was
    about the old one) is a problem."""
    problems = []
    for step, entry in sorted(steps.items()):
        outputs = entry.get("outputs", {}) if isinstance(entry, dict) else {}
        for rel, sha in sorted(outputs.items() if isinstance(outputs, dict) else []):
            where = path / rel
            if not isinstance(sha, str) or ".." in Path(rel).parts:
                problems.append(
                    Problem(str(path / BUILD_MANIFEST), f"a malformed output entry {rel!r}")
                )
            elif not where.is_file():
                problems.append(Problem(str(where), f"missing (written by {step})"))
            elif sha256_file(where) != sha:
                problems.append(
                    Problem(str(where), f"not what {step} wrote: replaced or edited since")
                )
    return problems


def _build_parts(path: Path) -> list[Path]:
    """Each artifact of a build folder, verified by its own reader: the bundle, the KV, the
    quantized tables, every chunks file and registry, and each repository's context folder
    (its prefixes' KV)."""
    found = [path / name for name in ("templates", "kv", "quant") if (path / name).is_dir()]
    chunks = path / "chunks"
    if chunks.is_dir():
        found += sorted(chunks.glob("*.jsonl")) + sorted(chunks.glob("*.registry.json"))
    context = path / "context"
    if context.is_dir():
        found += sorted(p for p in context.glob("*/kv") if (p / "index.json").is_file())
    return found
