"""Atomic artifact writing, content hashes and safetensors metadata shared by every command.

Every artifact goes through `atomic_write`: a temp file in the target folder, fsync, rename,
fsync of the folder. A crash mid-write leaves the previous file (or nothing) under the final
name, never a partial one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from copilot_cli.core import lazy
from copilot_cli.core.errors import ArtifactError, FingerprintMismatch

safetensors_io = lazy.module("copilot_cli.core.safetensors_io")

if TYPE_CHECKING:  # torch only where tensors are written: a no-op build never imports it
    import torch

_CHUNK = 1 << 20
# How fingerprints are computed (core/fingerprints.py); every artifact that records one also
# records this, and a reader refuses to compare fingerprints made under another scheme.
FINGERPRINT_SCHEME = 2
# The command that re-creates each artifact format (named when one must be made again).
REMAKE = {
    "copilot-opt.prompt-bundle": "compile-templates",
    "copilot-opt.kv-cache": "prefill-kv",
    "copilot-opt.kv-segment": "prefill-kv",
    "copilot-opt.quantized-embeddings": "quantize",
    "copilot-opt.regress-baseline": "regress --save-baseline",
    "copilot-opt.chunks": "chunk",
    "copilot-opt.chunk-registry": "chunk --registry",
}


def _remove_orphans(path: Path) -> None:
    """Temp files of `path` whose writer is gone (killed mid-write): their names carry its pid."""
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        pid = stale.name[len(path.name) + 2 :].split(".", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                stale.unlink()
        except PermissionError:
            pass  # alive, another user's


@contextlib.contextmanager
def atomic_write(path: Path | str, mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temp file next to `path`; on success fsync it and rename it over `path`.

    On any exception the temp file is removed and `path` is left as it was; temp files that a
    killed writer left behind are removed first.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans(path)
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent
    )
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, path)
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        if exc.filename is None:  # a write or fsync names no file: name the one being written
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be fsynced
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_bytes(path: Path | str, data: bytes) -> None:
    """Atomically write `data` to `path`."""
    with atomic_write(path) as handle:
        handle.write(data)


def canonical_json(obj: Any) -> str:
    """Stable JSON text: sorted keys, 2-space indent, trailing newline, UTF-8 kept as is."""
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def write_json(path: Path | str, obj: Any) -> None:
    """Atomically write `obj` as canonical JSON."""
    write_bytes(path, canonical_json(obj).encode("utf-8"))


def write_if_changed(path: Path | str, data: bytes) -> bool:
    """Write `data` atomically unless `path` already holds exactly those bytes.

    Returns True when the file was (re)written. Leaves mtimes alone on no-op rebuilds.
    """
    path = Path(path)
    if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
        return False
    write_bytes(path, data)
    return True


def sha256_bytes(data: bytes | memoryview) -> str:
    """Hex sha256 of a byte string."""
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str) -> str:
    """Hex sha256 of a string's UTF-8 bytes."""
    return sha256_bytes(text.encode("utf-8"))


def sha256_file(path: Path | str) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def is_count(value: Any) -> bool:
    """A non-negative integer below 2^53 (a count any JSON reader reads exactly): what a reader
    asks of every size, offset and count in an artifact before trusting it."""
    return type(value) is int and 0 <= value < 1 << 53


def encode_metadata(values: Mapping[str, Any]) -> dict[str, str]:
    """safetensors metadata is str -> str: strings stay, everything else becomes canonical JSON."""
    return {
        key: value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        for key, value in values.items()
    }


def decode_metadata(metadata: Mapping[str, str], key: str, *, where: str) -> Any:
    """Read one JSON-encoded metadata value, raising ArtifactError naming the key when absent."""
    if key not in metadata:
        raise ArtifactError(f"metadata key {key!r} is missing", where=where)
    try:
        return json.loads(metadata[key])
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"metadata key {key!r} is not valid JSON", where=where) from exc


def save_safetensors(
    path: Path | str, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, Any]
) -> None:
    """Atomically and deterministically write a safetensors file with encoded metadata, sealed
    by a digest over its canonical header and every tensor byte (read it with
    `safetensors_io.read_verified` / `read_tensors`)."""
    with atomic_write(path) as handle:
        safetensors_io.write_safetensors(
            handle, tensors, safetensors_io.sealed_metadata(tensors, encode_metadata(metadata))
        )


def check_scheme(metadata: Mapping[str, Any], *, where: str, fmt: str) -> None:
    """Refuse fingerprints recorded under another scheme: comparing them would be meaningless."""
    if str(metadata.get("fingerprint_scheme")) != str(FINGERPRINT_SCHEME):
        raise ArtifactError(
            "was made with an older fingerprint scheme (file bytes, not what the model and "
            f"tokenizer compute): re-run {REMAKE.get(fmt, 'the command that made it')}",
            where=where,
        )


def check_header(
    metadata: Mapping[str, Any],
    *,
    where: str,
    fmt: str,
    version: int,
    model_fingerprint: str | None = None,
    tokenizer_fingerprint: str | None = None,
) -> None:
    """Refuse an artifact of another format or version, or made for another model/tokenizer.

    Works for safetensors metadata (values are strings) and JSON manifests alike.
    """

    if metadata.get("format") != fmt:
        raise ArtifactError(f"format is {metadata.get('format')!r}, expected {fmt!r}", where=where)
    if str(metadata.get("format_version")) != str(version):
        found = metadata.get("format_version")
        older = isinstance(found, (int, str)) and str(found).isdigit() and int(found) < version
        hint = f": re-run {REMAKE.get(fmt, 'the command that made it')}" if older else ""
        raise ArtifactError(
            f"format_version {found!r} is not supported (this copilot-opt reads {version}){hint}",
            where=where,
        )
    if model_fingerprint or tokenizer_fingerprint:
        check_scheme(metadata, where=where, fmt=fmt)
    for what, expected in (("model", model_fingerprint), ("tokenizer", tokenizer_fingerprint)):
        found = metadata.get(f"{what}_fingerprint")
        if expected and found != expected:
            raise FingerprintMismatch(what, expected=expected, found=str(found or "?"), where=where)


DIGEST_KEY = "digest"


def json_digest(obj: Mapping[str, Any]) -> str:
    """sha256 of an object's canonical JSON, leaving out its own `digest` key."""
    body = {k: v for k, v in obj.items() if k != DIGEST_KEY}
    return sha256_text(canonical_json(body))


def sealed(obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` with a `digest` over everything else in it: any changed value is detected."""
    return {**obj, DIGEST_KEY: json_digest(obj)}


def check_sealed(obj: Mapping[str, Any], *, where: str) -> None:
    """Refuse a JSON artifact whose content does not match its digest."""
    if obj.get(DIGEST_KEY) != json_digest(obj):
        raise ArtifactError(
            "content does not match its digest: the file was edited or is corrupt", where=where
        )


def read_json_artifact(path: Path, *, fmt: str, version: int, what: str) -> dict[str, Any]:
    """Read a JSON manifest/index and check its format and version."""
    if not path.is_file():
        raise ArtifactError(f"not a {what} (no {path.name})", where=str(path.parent))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ArtifactError(f"{path.name} is not valid JSON ({exc})", where=str(path)) from exc
    except RecursionError:
        raise ArtifactError(
            f"{path.name} is nested too deeply to be ours", where=str(path)
        ) from None
    if not isinstance(data, dict):
        raise ArtifactError(f"{path.name} is not a JSON object", where=str(path))
    check_header(data, where=str(path), fmt=fmt, version=version)
    return data
