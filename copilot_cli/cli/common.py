"""What every command shares: options with COPILOT_OPT_* variables, --debug, one-line errors,
output (errors.py maps exceptions to them)."""

from __future__ import annotations

import json
import logging
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from copilot_cli.core.errors import CopilotError
from copilot_cli.core.inputs import check_cache_dir

ENV_PREFIX = "COPILOT_OPT_"
stdout_console = Console(soft_wrap=True)
stderr_console = Console(stderr=True, soft_wrap=True)
_state = {"debug": False}


def envvar(option: str) -> str:
    """`--keep-fp16` -> `COPILOT_OPT_KEEP_FP16`."""
    return ENV_PREFIX + option.lstrip("-").replace("-", "_").upper()


def option(name: str, *aliases: str, help: str, **kwargs: Any) -> Any:
    """A typer Option that can also be set from COPILOT_OPT_<NAME>."""
    return typer.Option(name, *aliases, envvar=envvar(name), help=help, **kwargs)


def set_debug(debug: bool) -> None:
    _state["debug"] = debug
    # what the library reads (core.cluster shows Ray's own logging at DEBUG)
    logging.getLogger("copilot_cli").setLevel(logging.DEBUG if debug else logging.NOTSET)


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


def check_environment() -> None:
    """What every command needs of its environment, checked before any work (one line, 2)."""

    try:
        check_cache_dir()
    except CopilotError as exc:
        if is_debug():
            raise
        raise fail(str(exc), exc.exit_code) from None
