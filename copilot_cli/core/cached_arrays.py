"""Arrays kept in the cache folder (`COPILOT_OPT_CACHE_DIR`): an `.npz` behind a line holding
the sha256 of its bytes, written atomically. An entry that is absent, damaged, edited or not an
archive at all reads as None: the caller builds it again. Never pickles."""

from __future__ import annotations

import contextlib
import hashlib
import io
import zipfile
from pathlib import Path

import numpy as np

from copilot_cli.core.artifacts import write_bytes


def read_arrays(path: Path) -> dict[str, np.ndarray] | None:
    """The arrays stored at `path`, or None when there is no sound entry."""
    try:
        digest, _, body = path.read_bytes().partition(b"\n")
        if digest.decode() != hashlib.sha256(body).hexdigest():
            return None
        with np.load(io.BytesIO(body), allow_pickle=False) as loaded:
            return {key: loaded[key] for key in loaded.files}
    except (OSError, ValueError, UnicodeDecodeError, KeyError, zipfile.BadZipFile):
        return None


def write_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Store `arrays` at `path` (a read-only cache is skipped: they are built again next time)."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    body = buffer.getvalue()
    with contextlib.suppress(OSError):
        write_bytes(path, hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
