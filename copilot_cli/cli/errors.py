"""Library errors -> one stderr line and an exit code (a traceback only with --debug)."""

from __future__ import annotations

import errno
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from copilot_cli.cli.common import fail, is_debug
from copilot_cli.cli.flags import command_flags, flag_for
from copilot_cli.core.errors import CheckFailed, CopilotError
from copilot_cli.core.options import OptionError

F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(func: F) -> F:
    """Map library errors to one stderr line and an exit code (traceback only with --debug)."""

    flags: dict[str, str] = {}

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except CheckFailed as exc:
            if is_debug():
                raise
            raise fail(str(exc), exc.exit_code) from None
        except OptionError as exc:
            if is_debug():
                raise
            flags.update(flags or command_flags(func))
            raise fail(f"{flag_for(exc.option, flags)}: {exc.message}", exc.exit_code) from None
        except CopilotError as exc:
            if is_debug():
                raise
            raise fail(str(exc), exc.exit_code) from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None
        except OSError as exc:
            if is_debug():
                raise
            if exc.errno in _ENVIRONMENT_ERRORS:
                raise fail(_environment_error(exc), 2) from None
            raise fail(_internal(exc), 3) from None
        except Exception as exc:
            if is_debug():
                raise
            raise fail(_internal(exc), 3) from None

    return wrapper  # type: ignore[return-value]


# Errors of the machine, not of copilot-opt: exit 2 naming the folder, no traceback.
_ENVIRONMENT_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}


def _environment_error(exc: OSError) -> str:
    """One line for a full disk or a refused write, naming the folder (never a temp file)."""
    target = Path(exc.filename or ".")
    folder = target.parent if target.name.startswith(".") or target.suffix == ".tmp" else target
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{folder}: no space left (nothing was half-written; free space and rerun)"
    return f"{folder}: {exc.strerror or 'not allowed'}"


def _internal(exc: BaseException) -> str:
    detail = str(exc).splitlines()[0] if str(exc) else ""
    return (
        f"internal error: {type(exc).__name__}: {detail} "
        "(a bug; rerun with --debug for the traceback)"
    )
