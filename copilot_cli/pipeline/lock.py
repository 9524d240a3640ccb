"""One build per output folder at a time (the lock every writer of a shared folder takes)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from copilot_cli.core.locks import OutputLocked, output_lock

BuildLocked = OutputLocked


@contextlib.contextmanager
def build_lock(out: Path) -> Iterator[None]:
    with output_lock(out, "build"):
        yield
