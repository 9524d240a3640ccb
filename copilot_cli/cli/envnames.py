"""Environment variables per command: `COPILOT_OPT_<COMMAND>_<FLAG>`.

A flag's variable names its command (`COPILOT_OPT_CONTEXT_BUDGET`,
`COPILOT_OPT_WARM_PLAN_BUDGET`), so a value meant for one command never reaches another that
happens to have a flag of the same name. The shared names of earlier releases
(`COPILOT_OPT_BUDGET`) are still read, with a deprecation warning, where they are unambiguous:
the flag belongs to one command, or every command that has it has the same option (same help,
same type). An ambiguous old name is not read; a command whose flag it would have set says so.
The root's own options (`--debug`, `--quiet`) keep `COPILOT_OPT_DEBUG` and `COPILOT_OPT_QUIET`;
`COPILOT_OPT_MODEL` stays what it always was as well, the default model of every command (read
by the library, core.modelspec.default_model), so no command warns of it.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

from copilot_cli.cli.common import ENV_PREFIX, warn

LIBRARY_VARIABLES = frozenset({"COPILOT_OPT_MODEL"})  # read by the library itself


def command_envvar(command: str, option: str) -> str:
    """`("warm-plan", "--budget")` -> `COPILOT_OPT_WARM_PLAN_BUDGET`."""
    return ENV_PREFIX + "_".join(
        part.lstrip("-").replace("-", "_").upper() for part in (command, option)
    )


def per_command(commands: dict[str, Any]) -> None:
    """Give every option of every command (click commands by name) its command's variable,
    remembering the old shared name where it is unambiguous (read with a warning)."""
    shared: dict[str, list[Any]] = defaultdict(list)
    for name, command in commands.items():
        for param in command.params:
            old = param.envvar if isinstance(param.envvar, str) else None
            if old is None or not old.startswith(ENV_PREFIX) or hasattr(param, "legacy_envvar"):
                continue
            flag = old[len(ENV_PREFIX) :]
            param.envvar = command_envvar(name, flag)
            param.legacy_envvar = old
            shared[old].append(param)
    for params in shared.values():
        same = len({(p.help, repr(_kind(p)), p.multiple) for p in params}) == 1
        for param in params:
            param.legacy_readable = same
            param.resolve_envvar_value = _legacy_aware(param, param.resolve_envvar_value)


def _legacy_aware(param: Any, resolve: Any) -> Any:
    def resolve_envvar_value(ctx: Any) -> str | None:
        value = resolve(ctx)
        if value is not None:
            return value
        old = param.legacy_envvar
        if not os.environ.get(old) or old in LIBRARY_VARIABLES:
            return None
        if not param.legacy_readable:
            warn(f"{old} is not read (several commands have this flag): set {param.envvar}")
            return None
        warn(f"{old} is deprecated: set {param.envvar}")
        return os.environ[old]

    return resolve_envvar_value


def variable_used(param: Any) -> str:
    """The variable a value from the environment came from (the old name, when only it is
    set)."""
    new = param.envvar if isinstance(param.envvar, str) else ""
    old = getattr(param, "legacy_envvar", None)
    if old and not os.environ.get(new) and os.environ.get(old):
        return old
    return new


def _kind(param: Any) -> Any:
    """What the option converts its value to (Typer keeps it as a type descriptor)."""
    described = getattr(param, "type_descriptor", None)
    return getattr(described, "annotation", None) or getattr(param, "type", None)
