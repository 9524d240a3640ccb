"""Library errors -> one stderr line and an exit code (a traceback only with --debug)."""

from __future__ import annotations

import errno
import functools
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from copilot_cli.cli.common import fail, is_debug
from copilot_cli.core.errors import CheckFailed, CopilotError
from copilot_cli.core.options import OptionError

F = TypeVar("F", bound=Callable[..., Any])


def command_flags(func: Callable[..., Any]) -> dict[str, str]:
    """A command function's parameters -> their long flag (arguments -> their NAME)."""
    flags: dict[str, str] = {}
    hints = typing.get_type_hints(func, include_extras=True)
    for name, hint in hints.items():
        for info in getattr(hint, "__metadata__", ()):
            # with Annotated, typer takes the first flag as the option's `default` slot
            given = [getattr(info, "default", None), *(getattr(info, "param_decls", ()) or ())]
            decls = [d for d in given if isinstance(d, str) and d.startswith("--")]
            flags[name] = decls[0] if decls else name.upper()
    return flags


def flag_for(option: str, flags: dict[str, str]) -> str:
    """The flag of option `option` (`max_tokens` -> `--max-tokens`), else the option name."""
    for name in (option, option.rsplit(".", 1)[-1]):
        if name in flags:
            return flags[name]
    return option


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
