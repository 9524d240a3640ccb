"""How the console script (`copilot-opt`, `python -m copilot_cli`) runs the app: with an exit
code that an interrupt can never turn into a signal death."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from copilot_cli.cli.common import fail


def run(app: Callable[..., Any]) -> None:
    """Run the app. Ctrl-C at any moment (even as the process winds down after the command's
    output) is exit 130 with one line, never Python's own SIGINT death."""
    try:
        app(prog_name="copilot-opt")
    except KeyboardInterrupt:
        _exit_interrupted(fail("interrupted", 130).exit_code)
    except SystemExit as exc:
        if exc.code == 130:
            _exit_interrupted(130)
        raise
    finally:
        # the work is done and said: a Ctrl-C while the interpreter tears down (Python has
        # restored the default action by then) would kill it with -SIGINT instead of its code
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _exit_interrupted(code: int) -> None:
    """Exit with `code` after an interrupt that was handled: CPython ends a process by SIGINT
    at exit when a KeyboardInterrupt once passed through a C extension's evaluation of Python
    code (torch's), even one caught and answered later (seen: 'error: interrupted', then -2).
    Exit handlers run and streams are flushed first, as a normal exit does."""

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
