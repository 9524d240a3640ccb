"""One writer per output at a time: an advisory lock file next to what is written.

Every command that writes a shared folder (prefill-kv, quantize, chunk, build) holds it while
it writes, so two runs into one output cannot interleave (the second stops at once with a
clear message). The lock is the kernel's (flock): a killed writer leaves no stale lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from copilot_cli.core.errors import CopilotError
from copilot_cli.core.outputs import LOCK as LOCK_NAME


class OutputLocked(CopilotError):
    """Another copilot-opt process is writing the same output."""


@contextlib.contextmanager
def output_lock(path: Path, what: str = "copilot-opt", *, folder: bool = True) -> Iterator[None]:
    """Hold the lock of output folder `path` (or, with folder=False, of the file `path`)."""
    lock = path / LOCK_NAME if folder else path.parent / f".{path.name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    handle = lock.open("a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            raise OutputLocked(
                f"another {what} (pid {holder}) is writing here; wait for it or use another output",
                where=str(path),
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()
