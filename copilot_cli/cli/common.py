"""What every command shares: options with COPILOT_OPT_* variables, error mapping, output."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from copilot_cli.core.errors import CheckFailed, CopilotError

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


def fail(message: str, code: int) -> typer.Exit:
    stderr_console.print(f"[bold red]error:[/] {message}", markup=True, highlight=False)
    return typer.Exit(code)


def handle_errors(func: F) -> F:
    """Map library errors to one stderr line and an exit code (traceback only with --debug)."""

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
        except CopilotError as exc:
            if is_debug():
                raise
            raise fail(str(exc).replace("\n", " "), exc.exit_code) from None
        except KeyboardInterrupt:
            raise fail("interrupted", 130) from None
        except Exception as exc:
            if is_debug():
                raise
            detail = str(exc).splitlines()[0] if str(exc) else ""
            raise fail(
                f"internal error: {type(exc).__name__}: {detail} "
                "(a bug; rerun with --debug for the traceback)",
                3,
            ) from None

    return wrapper  # type: ignore[return-value]


def print_json(payload: Any) -> None:
    """Machine-readable result on stdout: canonical JSON, one document."""
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def key_value_table(title: str, rows: list[tuple[str, Any]]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, str(value))
    return table


JsonOpt = Annotated[bool, option("--json", help="Print a machine-readable result on stdout.")]
