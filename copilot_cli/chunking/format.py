"""The chunks JSONL and the chunk registry: formats and their verified readers.

OUT.jsonl       a header line, then one chunk per line; the header's `digest` covers the
                header (without it) and every chunk line, byte for byte
REGISTRY.json   canonical JSON sealed by a digest; `chunks_digest` names the chunks file
                it describes
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson

from copilot_cli.chunking.records import Chunk, ChunksFile, ChunksHeader, Registry
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


def _parse(path: Path) -> tuple[dict[str, Any], list[Any], bool]:
    """(header, records, intact) of a chunks file: its JSON parsed, format and version
    checked, and whether its bytes match the header's digest. Records are not checked yet."""
    where = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ArtifactError(f"cannot read ({exc.strerror})", where=where) from None
    first, _, rest = raw.partition(b"\n")
    lines = rest.splitlines(keepends=True)
    try:
        header = orjson.loads(first)
        if not isinstance(header, dict) or header.get("type") != "header":
            raise ValueError("the first line is not a header")
        records = [orjson.loads(line) for line in lines]
    except (ValueError, RecursionError) as exc:
        raise ArtifactError(f"not a chunks file ({exc})", where=where) from None
    check_header(header, where=where, fmt=FORMAT, version=FORMAT_VERSION)
    check_scheme(header, where=where, fmt=FORMAT)
    intact = header.get("digest") == chunks_digest(header, lines) and raw.endswith(b"\n")
    return header, records, intact


def read_chunks(path: Path, *, tokenizer_fingerprint: str | None = None) -> ChunksFile:
    """The header and chunks of a chunks file, every byte checked against the header's digest
    and every record's fields checked (`records.Chunk`).

    Raises:
        ArtifactError: truncated, edited, another format/version, a record that is not what
            it claims (naming the record and the field), or made for another tokenizer
            (FingerprintMismatch)."""
    where = str(path)
    header, records, intact = _parse(path)
    if not intact:
        raise ArtifactError("content does not match its digest: edited or truncated", where=where)
    check_header(
        header,
        where=where,
        fmt=FORMAT,
        version=FORMAT_VERSION,
        tokenizer_fingerprint=tokenizer_fingerprint,
    )
    typed_header = ChunksHeader.read(header, where)
    chunks = tuple(Chunk.read(record, n, where) for n, record in enumerate(records, 1))
    seen: set[str] = set()
    for number, chunk in enumerate(chunks, 1):
        if chunk.id in seen:
            raise ArtifactError(f"chunk {number}: 'id' {chunk.id!r} occurs twice", where=where)
        seen.add(chunk.id)
    return ChunksFile(typed_header, chunks)


def read_registry(path: Path, *, tokenizer_fingerprint: str | None = None) -> Registry:
    """A chunk registry, its digest, format and (when given) tokenizer checked, and every
    entry's fields (`records.RegistryEntry`)."""
    where = str(path)
    registry = read_json_artifact(
        path, fmt=REGISTRY_FORMAT, version=REGISTRY_VERSION, what="chunk registry"
    )
    check_scheme(registry, where=where, fmt=REGISTRY_FORMAT)
    check_sealed(registry, where=where)
    check_header(
        registry,
        where=where,
        fmt=REGISTRY_FORMAT,
        version=REGISTRY_VERSION,
        tokenizer_fingerprint=tokenizer_fingerprint,
    )
    return Registry.read(registry, where)


def read_pair(
    chunks: Path, registry: Path | None, *, tokenizer_fingerprint: str | None = None
) -> tuple[ChunksFile, Registry | None]:
    """A chunks file and (when given) its registry, checked to belong together."""
    read = read_chunks(chunks, tokenizer_fingerprint=tokenizer_fingerprint)
    if registry is None:
        return read, None
    reg = read_registry(registry, tokenizer_fingerprint=tokenizer_fingerprint)
    if reg.chunks_digest != read.header.digest:
        raise ArtifactError(
            f"describes another chunks file than {chunks.name}", where=str(registry)
        )
    return read, reg


def _inspect_registry(
    path: Path, verify: bool, fp: str | None, problems: list[Problem]
) -> Inspection:
    if not verify:  # described as written: the number of entries, nothing checked
        raw = read_json_artifact(
            path, fmt=REGISTRY_FORMAT, version=REGISTRY_VERSION, what="chunk registry"
        )
        entries = raw.get("chunks")
        info = {"chunks": len(entries) if isinstance(entries, list) else "unreadable"}
        return Inspection(str(path), "chunk-registry", info, verify, problems)
    registry = checked(problems, str(path), lambda: read_registry(path, tokenizer_fingerprint=fp))
    info = {"chunks": len(registry.entries)} if registry else {"registry": "unreadable"}
    chunks_file = path.with_name(path.name.removesuffix(".registry.json") + ".jsonl")
    if registry and chunks_file.is_file():
        read = checked(problems, str(chunks_file), lambda: read_chunks(chunks_file))
        if read and read.header.digest != registry.chunks_digest:
            problems.append(
                Problem(str(path), f"describes another chunks file than {chunks_file.name}")
            )
    return Inspection(str(path), "chunk-registry", info, verify, problems)


def inspect_chunks(
    path: Path, *, verify: bool = True, expected: Expected | None = None
) -> Inspection:
    """A chunks file (or a registry) described; verified: digest, format, tokenizer, and for a
    registry with its chunks file beside it (`X.registry.json`, `X.jsonl`), that the two belong
    together. Without `verify`, a file that cannot be parsed raises."""
    expected = expected or Expected()
    problems: list[Problem] = []
    fp = expected.tokenizer_fingerprint

    if path.suffix == ".json":
        return _inspect_registry(path, verify, fp, problems)
    if verify:
        read = checked(problems, str(path), lambda: read_chunks(path, tokenizer_fingerprint=fp))
        header, count = (read.header.raw, len(read.chunks)) if read else (None, 0)
    else:  # described as written: the header and the number of records, nothing checked
        header, records, _ = _parse(path)
        count = len(records)
    if header is None:
        return Inspection(str(path), "chunks", {"chunks": "unreadable"}, verify, problems)
    info = {
        key: header.get(key) for key in ("format", "format_version", "repository", "max_tokens")
    }
    info.update(tokenizer_fingerprint=header.get("tokenizer_fingerprint"), chunks=count)
    return Inspection(str(path), "chunks", info, verify, problems)
