"""Usage errors (a bad flag value, an unknown option, a bad COPILOT_OPT_* variable) as one line.

click and Typer draw a boxed, multi-line message; every other error of ours is one
`error: WHERE: WHAT` line with exit 2 (docs/cli.md), so these are too. WHERE is the flag as
typed, or the environment variable when the value came from one.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer._click import exceptions as usage  # the click that Typer vendors and raises
from typer._click.core import ParameterSource
from typer.core import TyperArgument, TyperGroup

from copilot_cli.cli.common import fail, stdout_console
from copilot_cli.cli.envnames import per_command, variable_used


def usage_line(exc: usage.ClickException) -> str:
    """`WHERE: WHAT` for a click usage error."""
    if isinstance(exc, usage.NoSuchOption):
        hint = ""
        if exc.possibilities:
            hint = f" (did you mean {', '.join(sorted(exc.possibilities)[:3])}?)"
        return f"{exc.option_name}: no such option{hint}"
    if isinstance(exc, usage.MissingParameter) and exc.param is not None:
        return f"{_where(exc.param, None)}: missing (see {_command(exc)} --help)"
    if isinstance(exc, usage.BadParameter) and exc.param is not None:
        return f"{_where(exc.param, exc.ctx)}: {_what(exc)}"
    return f"{_command(exc)}: {exc.format_message().rstrip('.')}"


# Typer checks values with pydantic; its messages, said for a command line
_KINDS = {"float": "a number", "int": "an integer", "bool": "true or false (1/0, yes/no)"}


def _what(exc: usage.BadParameter) -> str:
    """`'abc' is not a number` for a value Typer could not convert, else click's message."""
    cause = exc.__cause__
    errors = cause.errors() if hasattr(cause, "errors") else []
    if errors and isinstance(errors[0], dict):
        kind = str(errors[0].get("type", "")).split("_", 1)[0]
        if kind in _KINDS:
            return f"{errors[0].get('input')!r} is not {_KINDS[kind]}"
    return exc.message


def _command(exc: usage.ClickException) -> str:
    ctx = getattr(exc, "ctx", None)
    return ctx.command_path if ctx is not None else "copilot-opt"


def _where(param: Any, ctx: Any) -> str:
    """The environment variable the value came from, else the longest flag, else the NAME."""
    source = ctx.get_parameter_source(param.name) if ctx is not None and param.name else None
    envvar = getattr(param, "envvar", None)
    if source == ParameterSource.ENVIRONMENT and isinstance(envvar, str):
        return variable_used(param)
    if isinstance(param, TyperArgument):
        return str(param.metavar or (param.name or "argument").upper()).strip("{}")
    flags = [o for o in param.opts if o.startswith("--")] or list(param.opts)
    return max(flags, key=len) if flags else str(param.name)


class OneLineErrors(TyperGroup):
    """The root command group: usage errors become one `error:` line and exit 2; every
    command's options read `COPILOT_OPT_<COMMAND>_<FLAG>` (envnames.py)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        per_command(self.commands)

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except usage.NoArgsIsHelpError as exc:
            stdout_console.print(exc.format_message(), highlight=False, markup=False)
            sys.exit(exc.exit_code)  # no command given: a usage error (2), help on stdout
        except usage.ClickException as exc:
            raise SystemExit(fail(usage_line(exc), 2).exit_code) from None
        except (typer.Abort, KeyboardInterrupt):  # also Ctrl-C after the command's work
            raise SystemExit(fail("interrupted", 130).exit_code) from None
        sys.exit(code if isinstance(code, int) else 0)
