"""The chunks JSONL and the chunk registry: formats and their verified readers.

OUT.jsonl       a header line, then one chunk per line; the header's `digest` covers the
                header (without it) and every chunk line, byte for byte
REGISTRY.json   canonical JSON sealed by a digest; `chunks_digest` names the chunks file
                it describes
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from copilot_cli.core.artifacts import (
    canonical_json,
    check_header,
    check_scheme,
    check_sealed,
    read_json_artifact,
)
from copilot_cli.core.errors import ArtifactError
from copilot_cli.core.inspection import Expected, Inspection, Problem, checked

FORMAT = "copilot-opt.chunks"
FORMAT_VERSION = 2  # 2: the header carries a digest of itself and every chunk line
REGISTRY_FORMAT = "copilot-opt.chunk-registry"
REGISTRY_VERSION = 2  # 2: sealed by a digest, names the chunks file it describes


def chunks_digest(header: dict[str, Any], lines: list[bytes]) -> str:
    """sha256 of the header's canonical JSON (without `digest`) and every chunk line."""
    digest = hashlib.sha256(
        canonical_json({k: v for k, v in header.items() if k != "digest"}).encode()
    )
    for line in lines:
        digest.update(line)
    return digest.hexdigest()


def read_chunks(
    path: Path, *, tokenizer_fingerprint: str | None = None, verify: bool = True
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and chunks of a chunks file, every byte checked against the header's digest.

    Raises:
        ArtifactError: truncated, edited, another format/version, or made for another
            tokenizer (FingerprintMismatch)."""
    where = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ArtifactError(f"cannot read ({exc.strerror})", where=where) from None
    first, _, rest = raw.partition(b"\n")
    lines = rest.splitlines(keepends=True)
    try:
        header = json.loads(first)
        if not isinstance(header, dict) or header.get("type") != "header":
            raise ValueError("the first line is not a header")
        chunks = [json.loads(line) for line in lines]
    except (ValueError, RecursionError) as exc:
        raise ArtifactError(f"not a chunks file ({exc})", where=where) from None
    check_header(header, where=where, fmt=FORMAT, version=FORMAT_VERSION)
    check_scheme(header, where=where, fmt=FORMAT)
    intact = header.get("digest") == chunks_digest(header, lines) and raw.endswith(b"\n")
    if verify and not intact:
        raise ArtifactError("content does not match its digest: edited or truncated", where=where)
    check_header(
        header,
        where=where,
        fmt=FORMAT,
        version=FORMAT_VERSION,
        tokenizer_fingerprint=tokenizer_fingerprint,
    )
    if not all(isinstance(c, dict) and c.get("type") == "chunk" for c in chunks):
        raise ArtifactError("a line after the header is not a chunk", where=where)
    return header, chunks


def read_registry(
    path: Path, *, tokenizer_fingerprint: str | None = None, verify: bool = True
) -> dict[str, Any]:
    """A chunk registry, its digest, format and (when given) tokenizer checked."""
    where = str(path)
    registry = read_json_artifact(
        path, fmt=REGISTRY_FORMAT, version=REGISTRY_VERSION, what="chunk registry"
    )
    check_scheme(registry, where=where, fmt=REGISTRY_FORMAT)
    if verify:
        check_sealed(registry, where=where)
    check_header(
        registry,
        where=where,
        fmt=REGISTRY_FORMAT,
        version=REGISTRY_VERSION,
        tokenizer_fingerprint=tokenizer_fingerprint,
    )
    if not isinstance(registry.get("chunks"), list):
        raise ArtifactError("'chunks' must be a list", where=where)
    return registry


def inspect_chunks(
    path: Path, *, verify: bool = True, expected: Expected | None = None
) -> Inspection:
    """A chunks file (or a registry) described; verified: digest, format, tokenizer, and for a
    registry with its chunks file beside it (`X.registry.json`, `X.jsonl`), that the two belong
    together. Without `verify`, a file that cannot be parsed raises."""
    expected = expected or Expected()
    problems: list[Problem] = []
    fp = expected.tokenizer_fingerprint

    def run(file: Path, check: Any) -> Any:
        return checked(problems, str(file), check) if verify else check()

    if path.suffix == ".json":
        registry = run(path, lambda: read_registry(path, tokenizer_fingerprint=fp, verify=verify))
        info = {"chunks": len(registry["chunks"])} if registry else {"registry": "unreadable"}
        chunks_file = path.with_name(path.name.removesuffix(".registry.json") + ".jsonl")
        if verify and registry and chunks_file.is_file():
            header = checked(problems, str(chunks_file), lambda: read_chunks(chunks_file)[0])
            if header and header["digest"] != registry.get("chunks_digest"):
                problems.append(
                    Problem(str(path), f"describes another chunks file than {chunks_file.name}")
                )
        return Inspection(str(path), "chunk-registry", info, verify, problems)
    read = run(path, lambda: read_chunks(path, tokenizer_fingerprint=fp, verify=verify))
    if read is None:
        return Inspection(str(path), "chunks", {"chunks": "unreadable"}, verify, problems)
    header, chunks = read
    info = {
        key: header.get(key) for key in ("format", "format_version", "repository", "max_tokens")
    }
    info.update(tokenizer_fingerprint=header.get("tokenizer_fingerprint"), chunks=len(chunks))
    return Inspection(str(path), "chunks", info, verify, problems)
