"""What a KV folder or segment file holds, verified (for `copilot-opt inspect`).

Verification reads every byte: each segment's digest and own hash, its agreement with the
index entry naming it, every prefix's chain (parents, positions, the token ids it spells) and
block hashes; with a model given, the fingerprints and shapes it must have been made for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from copilot_cli.core.artifacts import decode_metadata
from copilot_cli.core.errors import ArtifactError, FingerprintMismatch, InputError
from copilot_cli.core.inspection import Expected, Inspection, Problem, checked
from copilot_cli.core.safetensors_io import read_header
from copilot_cli.kv.format import INDEX, SEGMENTS_DIR, SegmentData, read_index, read_segment
from copilot_cli.kv.loader import check_block_hashes


def describe_segment(path: Path) -> dict[str, Any]:
    header, metadata = read_header(path)
    where = str(path)
    try:
        return {
            "format": metadata.get("format"),
            "format_version": metadata.get("format_version"),
            "segment_hash": metadata.get("segment_hash"),
            "parent": metadata.get("parent") or None,
            "start": int(metadata.get("start", 0)),
            "length": int(metadata.get("length", 0)),
            "dtype": metadata.get("dtype"),
            "num_layers": int(metadata.get("num_layers", 0)),
            "kv_heads": decode_metadata(metadata, "kv_heads", where=where),
            "head_dims": decode_metadata(metadata, "head_dims", where=where),
            "block_size": int(metadata.get("block_size", 0)),
            "block_hashes": len(decode_metadata(metadata, "block_hashes", where=where) or []),
            "model_fingerprint": metadata.get("model_fingerprint"),
            "tokenizer_fingerprint": metadata.get("tokenizer_fingerprint"),
            "tensors": len(header),
            "bytes": path.stat().st_size,
        }
    except (TypeError, ValueError) as exc:
        raise ArtifactError(f"malformed metadata ({exc})", where=where) from None


def inspect_kv_segment(
    path: Path, *, verify: bool = True, expected: Expected | None = None
) -> Inspection:
    """One segment file: described; verified unless `verify` is False."""
    expected = expected or Expected()
    problems: list[Problem] = []
    info = describe_segment(path)
    if verify:
        checked(problems, str(path), lambda: _read(path, expected))
    return Inspection(str(path), "kv-segment", info, verify, problems)


def inspect_kv_folder(
    path: Path, *, verify: bool = True, expected: Expected | None = None
) -> Inspection:
    """A KV folder: the index and totals; verified (every segment, every chain) by default.

    Without `verify` an index that cannot be read raises; with it, it is a problem like any
    other and every segment file is still checked on its own."""
    expected = expected or Expected()
    if not (path / INDEX).is_file():
        raise InputError("neither a KV folder (index.json) nor a segment file", where=str(path))
    if not verify:
        return Inspection(str(path), "kv-folder", _describe_index(path, read_index(path)), False)
    problems: list[Problem] = []
    index = checked(problems, str(path / INDEX), lambda: read_index(path))
    if index is None:
        for file in sorted((path / SEGMENTS_DIR).glob("*.safetensors")):
            checked(problems, str(file), lambda f=file: _read(f, expected))
        return Inspection(str(path), "kv-folder", {"index": "unreadable"}, True, problems)
    info = _describe_index(path, index)
    _check_expected(index, expected, str(path / INDEX), problems)
    segments = {
        seg: checked(
            problems, str(path / entry["file"]), lambda e=entry: _read(path / e["file"], expected)
        )
        for seg, entry in index["segments"].items()
    }
    for seg, data in segments.items():
        if data is not None:
            _check_against_index(data, index["segments"][seg], problems)
    for name, entry in index["prefixes"].items():
        chain = [segments[seg] for seg in entry["segments"]]
        if all(chain):
            _check_chain(name, entry, chain, problems, path / INDEX)
    indexed = {path / entry["file"] for entry in index["segments"].values()}
    info["unindexed_segment_files"] = len(
        set((path / SEGMENTS_DIR).glob("*.safetensors")) - indexed
    )
    return Inspection(str(path), "kv-folder", info, True, problems)


def _read(path: Path, expected: Expected) -> SegmentData:
    return read_segment(
        path,
        model_fingerprint=expected.model_fingerprint,
        tokenizer_fingerprint=expected.tokenizer_fingerprint,
        geometry=expected.geometry,
    )


def _check_expected(
    index: dict[str, Any], expected: Expected, where: str, problems: list[Problem]
) -> None:
    for what in ("model", "tokenizer"):
        want, found = getattr(expected, f"{what}_fingerprint"), index[f"{what}_fingerprint"]
        if want and want != found:
            problems.append(
                Problem(where, FingerprintMismatch(what, expected=want, found=found).message)
            )


def _check_against_index(data: SegmentData, entry: dict[str, Any], problems: list[Problem]) -> None:
    meta = data.metadata
    found = {"start": data.start, "length": len(data.token_ids), "parent": meta.get("parent", "")}
    wanted = {key: entry.get(key) for key in found}
    if found != wanted:
        differ = ", ".join(
            f"{k} {found[k]!r} (index: {wanted[k]!r})" for k in found if found[k] != wanted[k]
        )
        problems.append(Problem(str(data.path), f"differs from its index entry: {differ}"))


def _check_chain(
    name: str, entry: dict[str, Any], chain: list[Any], problems: list[Problem], index: Path
) -> None:
    token_ids = [t for segment in chain for t in segment.token_ids]
    if token_ids != entry["token_ids"]:
        problems.append(Problem(str(index), f"prefix {name!r}: its segments hold other tokens"))
        return
    model_fp = chain[0].metadata["model_fingerprint"]
    checked(problems, str(index), lambda: check_block_hashes(chain, token_ids, model_fp))


def _describe_index(path: Path, index: dict[str, Any]) -> dict[str, Any]:
    prefixes = [
        {
            "name": name,
            "tokens": entry["tokens"],
            "segments": len(entry["segments"]),
            "block_hashes": len(entry["block_hashes"]),
            "origin": entry["origin"],
        }
        for name, entry in index["prefixes"].items()
    ]
    segments = index["segments"]
    return {
        "format": index["format"],
        "format_version": index["format_version"],
        "dtype": index["dtype"],
        "block_size": index["block_size"],
        "model_fingerprint": index["model_fingerprint"],
        "tokenizer_fingerprint": index["tokenizer_fingerprint"],
        "geometry": index["geometry"],
        "prefixes": prefixes,
        "segments": len(segments),
        "sum_prefix_tokens": sum(p["tokens"] for p in prefixes),
        "distinct_tokens": sum(s["length"] for s in segments.values()),
        "bytes": sum(s["bytes"] for s in segments.values()),
    }
