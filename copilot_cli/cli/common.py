"""What every command shares: options with COPILOT_OPT_* variables, error mapping, output."""

from __future__ import annotations

import errno
import functools
import json
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from copilot_cli.core.errors import CheckFailed, CopilotError
from copilot_cli.core.options import OptionError

ENV_PREFIX = "COPILOT_OPT_"
stdout_console = Console(soft_wrap=True)
stderr_console = Console(stderr=True, soft_wrap=True)
_state = {"debug": False}

F = TypeVar("F", bound=Callable[..., Any])


def envvar(option: str) -> str:
    """`--keep-fp16` -> `COPILOT_OPT_KEEP_FP16`."""
    return ENV_PREFIX + option.lstrip("-").replace("-", "_").upper()


def option(name: str, *aliases: str, help: str, **kwargs: Any) -> Any:
    """A typer Option that can also be set from COPILOT_OPT_<NAME>."""
    return typer.Option(name, *aliases, envvar=envvar(name), help=help, **kwargs)


def set_debug(debug: bool) -> None:
    _state["debug"] = debug


def is_debug() -> bool:
    return _state["debug"]


MAX_MESSAGE = 500  # characters of an error echoed back (a bad input may be megabytes)


def clip(text: str, limit: int = MAX_MESSAGE) -> str:
    """One line, at most `limit` characters: user input echoed in errors can be huge."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fail(message: str, code: int) -> typer.Exit:
    """Print one error line (user text escaped, never read as markup) and exit with `code`."""
    stderr_console.print(f"[bold red]error:[/] {escape(clip(message))}", highlight=False)
    return typer.Exit(code)


def warn(message: str) -> None:
    stderr_console.print(f"[yellow]warning:[/] {escape(clip(message, 2000))}", highlight=False)


def note(message: str) -> None:
    stderr_console.print(escape(message), highlight=False)


def cell(value: Any) -> Text:
    """A table cell holding user text as text (a name like `[/]` is not markup)."""
    return value if isinstance(value, Text) else Text(str(value))


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


def print_json(payload: Any) -> None:
    """Machine-readable result on stdout: canonical JSON, one document."""
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def key_value_table(title: str, rows: list[tuple[str, Any]]) -> Table:
    table = Table(title=cell(title), show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(cell(key), cell(value))
    return table


JsonOpt = Annotated[bool, option("--json", help="Print a machine-readable result on stdout.")]
