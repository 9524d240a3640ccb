"""What a compiled prompt bundle holds, verified (for `copilot-opt inspect`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from copilot_cli.core.errors import FingerprintMismatch
from copilot_cli.core.inspection import Expected, Inspection, Problem, checked
from copilot_cli.prompts.bundle import MANIFEST, load_bundle, read_manifest


def inspect_bundle(
    path: Path, *, verify: bool = True, expected: Expected | None = None
) -> Inspection:
    """A bundle folder described; verified: the manifest's digest, every source and static
    prefix against its hash, and the tokenizer it was compiled for (with a model)."""
    expected = expected or Expected()
    if not verify:
        return Inspection(str(path), "prompt-bundle", _describe(read_manifest(path)), False)
    problems: list[Problem] = []
    bundle = checked(problems, str(path / MANIFEST), lambda: load_bundle(path))
    if bundle is None:
        return Inspection(str(path), "prompt-bundle", {"manifest": "unreadable"}, True, problems)
    manifest = bundle.manifest
    want, found = expected.tokenizer_fingerprint, manifest.get("tokenizer_fingerprint")
    if want and found and want != found:
        mismatch = FingerprintMismatch("tokenizer", expected=want, found=found)
        problems.append(Problem(str(path / MANIFEST), mismatch.message))
    return Inspection(str(path), "prompt-bundle", _describe(manifest), True, problems)


def _describe(manifest: dict[str, Any]) -> dict[str, Any]:
    templates = [
        {
            "name": entry["name"],
            "static_prefix_chars": len(entry["static_prefix"]),
            "static_prefix_tokens": entry.get("static_prefix_tokens"),
        }
        for entry in manifest["templates"]
    ]
    return {
        "format": manifest["format"],
        "format_version": manifest["format_version"],
        "tokenizer_fingerprint": manifest.get("tokenizer_fingerprint"),
        "templates": templates,
        "parts": len(manifest["parts"]),
    }
