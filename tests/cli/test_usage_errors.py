"""Usage errors are one `error: WHERE: WHAT` line and exit 2, like every other bad input: a
value that is not a number, an unknown option or command, a missing argument, and a bad
COPILOT_OPT_* variable (named as the variable, not the flag). No boxes, no tracebacks."""

from __future__ import annotations

import pytest
import typer

from copilot_cli.cli import app
from copilot_cli.cli.envnames import command_envvar
from tests.cli.test_hostile_inputs import REPO, _refused

README = str(REPO / "README.md")


def _typed_options() -> list[tuple[str, str, str]]:
    """(command, flag, kind) for every option of every command whose value is a number or a
    boolean: the ones whose conversion can fail."""
    command = typer.main.get_command(app)
    found = []
    for name, sub in sorted(command.commands.items()):
        for param in sub.params:
            kind = param.bare_type() if hasattr(param, "bare_type") else ""
            flags = [o for o in param.opts if o.startswith("--")]
            if flags and kind in ("int", "float", "bool") and flags[0] != "--help":
                found.append((name, max(flags, key=len), kind))
    return found


TYPED = _typed_options()


def test_every_command_has_typed_options_to_check():
    assert len({command for command, _, _ in TYPED}) >= 8 and len(TYPED) >= 30


@pytest.mark.parametrize(("command", "flag", "kind"), [t for t in TYPED if t[2] != "bool"])
def test_a_value_that_is_not_a_number(runner, command, flag, kind):
    result = _refused(runner, [command, flag, "abc"], f"{flag}: 'abc' is not")
    assert "│" not in result.output and "Usage:" not in result.output


@pytest.mark.parametrize(("command", "flag", "kind"), TYPED)
def test_a_bad_environment_variable_is_named(runner, command, flag, kind, monkeypatch):
    """The fuzz of env values: every typed option's variable set to what it cannot be."""
    variable = command_envvar(command, flag)
    monkeypatch.setenv(variable, "maybe-not")
    result = _refused(runner, [command, *_required(command)], variable)
    assert f"error: {variable}: 'maybe-not' is not" in result.stderr


def _required(command: str) -> list[str]:
    """Arguments that let a command reach its options (the rest are checked later)."""
    return {
        "render": ["bundle", "name", "--inputs", README],
        "prune": [README],
        "inspect": [README],
        "serve": ["kv"],
        "warm-plan": [README],
        "chunk": [str(REPO / "sample_data" / "repo")],
        "context": [README],
    }.get(command, [])


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["prune", README, "--rate", "nan"], "--rate: must be a finite number"),
        (["prune", README, "--bogus"], "--bogus: no such option"),
        (["prune", README, "--rat", "0.5"], "did you mean"),
        (["quantize", "--bits", "8.5"], "--bits: '8.5' is not an integer"),
        (["bogus-command"], "No such command 'bogus-command'"),
        (["prune"], "INPUT: missing"),
        (["render", "b"], "NAME: missing"),
        (["regress", "--gen-tokens"], "--gen-tokens"),
    ],
)
def test_usage_errors_are_one_line(runner, args, expect):
    _refused(runner, args, expect)


def test_no_arguments_prints_the_help_and_is_a_usage_error(runner):
    result = runner.invoke(app, [])
    assert result.exit_code == 2
    assert "Usage: copilot-opt" in result.stdout and "compile-templates" in result.stdout


def test_help_and_version_still_exit_0(runner):
    assert runner.invoke(app, ["--help"]).exit_code == 0
    assert runner.invoke(app, ["prune", "--help"]).exit_code == 0
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.startswith("copilot-opt ")
