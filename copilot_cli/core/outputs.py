"""The one guard every writer passes before it writes: never destroy what copilot-opt did not write.

A folder is written into (or replaced) only when it does not exist, is empty (no entry at all,
dot files included), or is copilot-opt's own artifact of the same kind: it holds our marker
(`.copilot-opt-output`, written before the writer's first file, so a first run that was
killed is still recognised) or the artifact's own manifest naming the same format. An
existing file is replaced only when it is our artifact of the same kind: its header names the
format, or it starts with the signature its writer always emits, or (an output with neither,
such as pruned text) its bytes are what copilot-opt last wrote there, as recorded in the
cache. Anything else is an `OptionError` naming the option and the path, raised before any
work, with nothing touched.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

from copilot_cli.core.artifacts import fsync_dir, sha256_file, write_bytes
from copilot_cli.core.fingerprints import cache_dir
from copilot_cli.core.options import OptionError

MARKER = ".copilot-opt-output"
LOCK = ".copilot-opt.lock"  # core.locks: a writer's lock, taken in the folder before it writes
# Dot entries copilot-opt itself leaves in an output folder: the marker and the writer lock.
OWN_DOT_ENTRIES = frozenset({MARKER, LOCK})
_JSON_LIMIT = 1 << 30  # a JSON "artifact" larger than this is not parsed to find its format
_SAFETENSORS_HEADER_LIMIT = 100 << 20
# A foreign folder is probed for the artifact it might hold (to say "holds a prompt bundle")
# through at most this many of its JSON/safetensors files of at most this size.
_KIND_PROBES = 16
_KIND_PROBE_BYTES = 64 << 20


def check_output_shape(path: Path | None, option: str, *, folder: bool) -> None:
    """Cheap checks of an output path (no reading): a folder where a file is wanted or the
    reverse, or a path below a regular file."""
    if path is None:
        return
    for parent in Path(os.path.abspath(path)).parents:
        if parent.exists():
            if not parent.is_dir():
                raise OptionError(option, f"{path}: {parent} is a file, not a folder")
            break
    if folder and path.exists() and not path.is_dir():
        raise OptionError(option, f"{path} is not a folder")
    if not folder and path.is_dir():
        raise OptionError(option, f"{path} is a folder; give a file path")


def claim_folder(
    path: Path,
    option: str,
    *,
    fmt: str,
    manifest: str,
    label: str,
    owned: Iterable[str] | None = None,
) -> None:
    """Refuse `path` unless copilot-opt may write the artifact `fmt` there. Reads only; the
    writer calls `mark` just before its first file.

    Args:
        path: the output folder.
        option: the option that named it (for the error).
        fmt: the artifact's format (`copilot-opt.kv-cache`).
        manifest: the file in the folder whose header names `fmt` (`index.json`).
        label: what the artifact is called in messages ("KV folder").
        owned: for a writer that swaps the whole folder in (`replaced_folder`): the entries
            it writes. The folder must then hold nothing else.
    """
    check_output_shape(path, option, folder=True)
    if path.is_dir():
        entries = sorted(p.name for p in path.iterdir() if not _own_transient(p.name))
        if entries and not _ours(path, fmt, manifest):
            found = _kind_of(path)
            what = f"holds a {found} artifact, not a {label}" if found else _foreign_text(entries)
            raise OptionError(option, f"{path} {what}: give a new or empty folder")
        if owned is not None:
            allowed = set(owned) | OWN_DOT_ENTRIES
            if foreign := [name for name in entries if name not in allowed]:
                raise OptionError(
                    option,
                    f"{path} {_foreign_text(foreign)}; replacing the folder would delete them: "
                    "give a new or empty folder",
                )


def claim_file(
    path: Path | None,
    option: str,
    *,
    fmt: str | None = None,
    signature: bytes | None = None,
    label: str,
    inputs: Iterable[Path] = (),
) -> None:
    """Refuse to replace an existing file that is not our artifact `fmt` (header) or does
    not start with `signature`; an empty file holds nothing to lose. `inputs` are files the
    same run reads: writing over one of them is refused whatever it holds."""
    if path is None:
        return
    check_output_shape(path, option, folder=False)
    if not path.exists():
        return
    resolved = path.resolve()
    if any(resolved == Path(p).resolve() for p in inputs):
        raise OptionError(option, f"{path} is also an input of this run: give another path")
    if not path.is_file():
        raise OptionError(option, f"{path} is not a regular file: give another path")
    if path.stat().st_size == 0:
        return
    if fmt is not None and sniff_format(path) == fmt:
        return
    if signature is not None and _starts_with(path, signature):
        return
    if fmt is None and signature is None and _remembered(path):
        return
    found = sniff_format(path)
    what = f"is a {found} file, not a {label}" if found else f"exists and is not a {label}"
    raise OptionError(
        option, f"{path} {what} that copilot-opt wrote: remove it first or give another path"
    )


def remember_written(path: Path) -> None:
    """Record what copilot-opt just wrote to `path`, for an output with no header of its own
    (pruned text): a later run may replace exactly those bytes, and nothing else."""
    write_bytes(_record_of(path), sha256_file(path).encode("ascii"))


def _remembered(path: Path) -> bool:
    record = _record_of(path)
    try:
        return record.stat().st_size == 64 and record.read_bytes().decode() == sha256_file(path)
    except (OSError, UnicodeDecodeError):
        return False


def _record_of(path: Path) -> Path:

    key = hashlib.sha256(os.path.abspath(path).encode("utf-8", "surrogateescape")).hexdigest()
    return cache_dir() / "written" / key


def sniff_format(path: Path) -> str | None:
    """The `format` a copilot-opt artifact file names in its header (JSON, the first line of
    JSONL, or safetensors metadata); None for anything else. Reads only what it must."""
    try:
        with path.open("rb") as handle:
            head = handle.read(8)
            size = os.fstat(handle.fileno()).st_size
            if len(head) == 8 and head[:1] != b"{":
                (length,) = struct.unpack("<Q", head)
                if 2 <= length <= min(_SAFETENSORS_HEADER_LIMIT, size - 8):
                    header = json.loads(handle.read(length))
                    return _format_of(header.get("__metadata__"))
                return None
            if head[:1] != b"{":
                return None
            handle.seek(0)
            first = handle.readline(_JSON_LIMIT)
            try:
                return _format_of(json.loads(first))
            except ValueError:
                pass
            if size > _JSON_LIMIT:
                return None
            handle.seek(0)
            return _format_of(json.loads(handle.read()))
    except (OSError, ValueError, RecursionError, AttributeError):
        return None


def _format_of(header: object) -> str | None:
    if isinstance(header, dict) and isinstance(header.get("format"), str):
        fmt = header["format"]
        return fmt if fmt.startswith("copilot-opt.") else None
    return None


def _starts_with(path: Path, signature: bytes) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(len(signature)) == signature
    except OSError:
        return False


def _own_transient(name: str) -> bool:
    """The writer lock, or the marker while another run is still writing it (its temp file,
    `..copilot-opt-output.PID.RANDOM.tmp`): neither is a foreign file; the lock then decides."""
    return name == LOCK or (name.startswith(f".{MARKER}.") and name.endswith(".tmp"))


def _ours(path: Path, fmt: str, manifest: str) -> bool:
    return _marker_format(path) == fmt or (
        (path / manifest).is_file() and sniff_format(path / manifest) == fmt
    )


def _kind_of(path: Path) -> str | None:
    """The kind of copilot-opt artifact a folder holds, from its marker or any manifest."""
    if found := _marker_format(path):
        return found
    candidates = (p for p in path.iterdir() if p.suffix in (".json", ".safetensors"))
    for child in sorted(candidates)[:_KIND_PROBES]:
        small = child.is_file() and child.stat().st_size <= _KIND_PROBE_BYTES
        if small and (found := sniff_format(child)):
            return found
    return None


def _marker_format(path: Path) -> str | None:
    marker = path / MARKER
    if not marker.is_file() or marker.stat().st_size > 4096:
        return None
    return sniff_format(marker)


def mark(
    path: Path, fmt: str, *, writing_id: str | None = None, replaces: str | None = None
) -> None:
    """Create folder `path` if needed and mark it as copilot-opt's artifact `fmt` (once): a
    later run recognises it even if this one is killed before its manifest is written.

    `writing_id` (a staging folder's own id, also in its name) and `replaces` (the id of the
    folder it is about to replace) are what let a later run prove that a leftover staging or
    previous folder is copilot-opt's before it removes one."""
    path.mkdir(parents=True, exist_ok=True)
    if writing_id is None and _marker_format(path) == fmt:
        return
    record: dict[str, str] = {"format": fmt}
    if writing_id is not None:
        record["id"] = writing_id
    if replaces is not None:
        record["replaces"] = replaces
    write_bytes(path / MARKER, (json.dumps(record, sort_keys=True) + "\n").encode("utf-8"))


def _marker(path: Path) -> dict[str, object]:
    """The marker of folder `path` (empty when it has none, or not a readable one)."""
    marker = path / MARKER
    try:
        if marker.is_symlink() or not marker.is_file() or marker.stat().st_size > 4096:
            return {}
        data = json.loads(marker.read_bytes())
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _foreign_text(names: list[str]) -> str:
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return f"holds files copilot-opt did not write ({shown})"


@contextlib.contextmanager
def replaced_folder(target: Path, *, fmt: str) -> Iterator[Path]:
    """Build a multi-file artifact in a staging folder, then swap it in as one unit.

    Yields the staging folder (already marked as copilot-opt's artifact `fmt`). On success the
    previous folder is moved aside, the new one renamed in, the previous one removed; on
    failure the staging folder is removed and `target` is as it was. A kill between the two
    renames leaves the previous folder under `.NAME.previous`, which the next run puts back
    before anything else. The caller has claimed `target` first (`outputs.claim_folder` with
    `owned`): a folder holding anything the artifact does not own is never replaced.

    Nothing is removed by its name alone. A staging folder is `.NAME.staging-PID-ID` and its
    marker carries the same ID; the new folder's marker names the ID of the folder it replaces,
    so a `.NAME.previous` left by a killed run is removed only when the folder now at `target`
    says it replaced exactly that one. A folder of those names that copilot-opt cannot prove it
    wrote is refused (OptionError naming it) before any work, and never touched.
    """
    target = Path(os.path.abspath(target))
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    previous = parent / f".{target.name}.previous"
    _settle_previous(target, previous, fmt)
    _remove_stale_staging(target, fmt)
    writing_id = secrets.token_hex(8)
    staging = parent / f".{target.name}.staging-{os.getpid()}-{writing_id}"
    staging.mkdir()  # a new name: never an existing folder
    try:
        replaces = _marker(target).get("id") if target.is_dir() else None
        mark(
            staging,
            fmt,
            writing_id=writing_id,
            replaces=replaces if isinstance(replaces, str) else None,
        )
        yield staging
        if target.exists():
            os.replace(target, previous)  # checked free above, and we hold the output lock
        os.replace(staging, target)
        shutil.rmtree(previous, ignore_errors=True)  # moved there by this run
        fsync_dir(parent)
    finally:
        if staging.is_dir():
            shutil.rmtree(staging, ignore_errors=True)  # made by this run


def _settle_previous(target: Path, previous: Path, fmt: str) -> None:
    """A `.NAME.previous` left by a run killed between its two renames: put back (no target)
    or removed (the target replaced it), only when its marker proves it ours; else refused."""
    if not previous.exists() and not previous.is_symlink():
        return
    mine = (
        previous.is_dir() and not previous.is_symlink() and _marker(previous).get("format") == fmt
    )
    if mine and not target.exists():
        os.replace(previous, target)  # a swap that was killed halfway: undo it
        return
    old_id = _marker(previous).get("id") if mine else None
    if mine and old_id is not None and _marker(target).get("replaces") == old_id:
        shutil.rmtree(previous, ignore_errors=True)  # the swap finished; only the cleanup was lost
        return
    raise OptionError(
        "out",
        f"{previous} exists and copilot-opt cannot tell that it wrote it: "
        "move it away (copilot-opt never deletes it)",
    )


def _remove_stale_staging(target: Path, fmt: str) -> None:
    """Staging folders of killed runs: removed only when the pid in the name is gone and the
    marker inside carries the id in the name (an empty one is removed with rmdir, which
    removes nothing else). Anything else of that name is left alone."""
    for stale in target.parent.glob(f".{target.name}.staging-*"):
        pid, _, writing_id = stale.name.rsplit(".staging-", 1)[1].partition("-")
        if not pid.isdigit() or _alive(int(pid)) or stale.is_symlink() or not stale.is_dir():
            continue
        marker = _marker(stale)
        if writing_id and marker.get("id") == writing_id and marker.get("format") == fmt:
            shutil.rmtree(stale, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                stale.rmdir()  # only if empty: a run killed between mkdir and its marker


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
