"""Progress bars on stderr: shown for slow work on a terminal, silent otherwise or with --quiet."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

_state: dict[str, object] = {"quiet": False, "active": None}
stderr_console = Console(stderr=True)


def set_quiet(quiet: bool) -> None:
    """Silence all progress output (the CLI's --quiet)."""
    _state["quiet"] = quiet


def enabled() -> bool:
    return not _state["quiet"] and stderr_console.is_terminal


class Task:
    """A handle on one progress line; a no-op when progress is disabled."""

    def __init__(self, progress: Progress | None, task_id: int | None) -> None:
        self._progress = progress
        self._task_id = task_id

    def advance(self, amount: float = 1) -> None:
        if self._progress is not None and self._task_id is not None:
            self._progress.advance(self._task_id, amount)

    def update(self, **fields: object) -> None:
        if self._progress is not None and self._task_id is not None:
            self._progress.update(self._task_id, **fields)


@contextlib.contextmanager
def progress(description: str, total: float | None = None) -> Iterator[Task]:
    """A transient progress bar (or spinner when `total` is None) on stderr. Nested calls add a
    line to the bar already shown (one live display at a time)."""
    if not enabled():
        yield Task(None, None)
        return
    active = _state.get("active")
    if isinstance(active, Progress):
        task_id = active.add_task(description, total=total)
        try:
            yield Task(active, task_id)
        finally:
            active.remove_task(task_id)
        return
    columns = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=stderr_console, transient=True) as bar:
        _state["active"] = bar
        try:
            yield Task(bar, bar.add_task(description, total=total))
        finally:
            _state["active"] = None


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """fd 1 onto fd 2 for the block: processes started inside (an engine and its workers)
    inherit it and log there, so stdout keeps only what the command prints."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
