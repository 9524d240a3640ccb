"""One build per output folder at a time: an advisory lock with a clear message."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from copilot_cli.core.errors import CopilotError

LOCK_NAME = ".build.lock"


class BuildLocked(CopilotError):
    """Another build is writing the same output folder."""


@contextlib.contextmanager
def build_lock(out: Path) -> Iterator[None]:
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_NAME
    handle = path.open("a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            raise BuildLocked(
                f"another build (pid {holder}) is running on this folder; wait "
                "for it or use another --out",
                where=str(out),
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()
