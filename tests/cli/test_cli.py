import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import typer

from copilot_cli import __version__
from copilot_cli.cli import app
from copilot_cli.cli.envnames import command_envvar


def test_help_lists_commands(runner):
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "model-info" in result.stdout


def test_version(runner):
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"copilot-opt {__version__}"


def test_python_dash_m_works():
    out = subprocess.run(
        [sys.executable, "-m", "copilot_cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "copilot-opt" in out.stdout and "model-info" in out.stdout


def test_console_script_is_installed():
    exe = str(Path(sys.executable).parent / "copilot-opt")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"copilot-opt {__version__}"


def test_model_info_json(runner, tiny_llama_dir):
    result = runner.invoke(app, ["model-info", "--model", str(tiny_llama_dir), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["model_type"] == "llama"
    assert info["kv_heads"] == 2 and info["attention_heads"] == 4
    assert len(info["model_fingerprint"]) == 64


def test_options_come_from_environment(runner, tiny_llama_dir):
    """A command's variables name it; COPILOT_OPT_MODEL stays the default model of all."""
    env = {"COPILOT_OPT_MODEL": str(tiny_llama_dir), "COPILOT_OPT_MODEL_INFO_JSON": "1"}
    result = runner.invoke(app, ["model-info"], env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["source"] == str(tiny_llama_dir)
    assert "warning" not in result.stderr
    env = {"COPILOT_OPT_MODEL_INFO_MODEL": str(tiny_llama_dir), "COPILOT_OPT_MODEL_INFO_JSON": "1"}
    result = runner.invoke(app, ["model-info"], env=env)
    assert json.loads(result.stdout)["source"] == str(tiny_llama_dir)


def test_a_variable_of_one_command_never_reaches_another(runner, tmp_path):
    """--budget is tokens for context and bytes for warm-plan: the old shared name is read by
    neither (each says which name to set), the new ones each by its own command."""
    chunks = tmp_path / "missing.jsonl"
    args = ["context", str(chunks), "--repo", str(tmp_path), "--file", "a.py"]
    result = runner.invoke(app, args, env={"COPILOT_OPT_BUDGET": "64MiB"})
    assert "is not an integer" not in result.output
    assert "COPILOT_OPT_BUDGET is not read" in result.stderr
    assert "set COPILOT_OPT_CONTEXT_BUDGET" in result.stderr
    result = runner.invoke(app, args, env={"COPILOT_OPT_WARM_PLAN_BUDGET": "64MiB"})
    assert "is not an integer" not in result.output and "warning" not in result.stderr
    result = runner.invoke(app, args, env={"COPILOT_OPT_CONTEXT_BUDGET": "64MiB"})
    assert result.exit_code == 2
    assert "error: COPILOT_OPT_CONTEXT_BUDGET: '64MiB' is not an integer" in result.stderr


def test_an_old_unambiguous_name_is_read_with_a_warning(runner):
    """--rate belongs to prune alone: COPILOT_OPT_RATE still sets it, says it is deprecated,
    and a bad value names the variable the user set."""
    result = runner.invoke(app, ["prune", "x.txt"], env={"COPILOT_OPT_RATE": "abc"})
    assert result.exit_code == 2
    assert "COPILOT_OPT_RATE is deprecated: set COPILOT_OPT_PRUNE_RATE" in result.stderr
    assert "error: COPILOT_OPT_RATE: 'abc' is not a number" in result.stderr


def test_every_option_variable_names_its_command():
    command = typer.main.get_command(app)
    for name, sub in command.commands.items():
        for param in sub.params:
            if isinstance(param.envvar, str):
                flag = max((o for o in param.opts if o.startswith("--")), key=len)
                assert param.envvar.startswith(command_envvar(name, "")), (name, flag)


@pytest.mark.parametrize(
    ("make_path", "reason"),
    [
        (lambda tmp: tmp / "missing", "does not exist"),
        (lambda tmp: tmp, "no config.json"),
    ],
)
def test_bad_model_exits_2_with_one_line(runner, tmp_path, make_path, reason):
    path = make_path(tmp_path)
    result = runner.invoke(app, ["model-info", "--model", str(path)])
    assert result.exit_code == 2
    assert reason in result.stderr and str(path) in result.stderr
    assert "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1


def test_truncated_weights_exit_2_without_traceback(runner, tiny_llama_dir, tmp_path):
    broken = shutil.copytree(tiny_llama_dir, tmp_path / "broken")
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    result = runner.invoke(app, ["model-info", "--model", str(broken)])
    assert result.exit_code == 2
    assert "model.safetensors" in result.stderr and "Traceback" not in result.output


def test_debug_shows_the_exception(runner, tmp_path):
    result = runner.invoke(app, ["--debug", "model-info", "--model", str(tmp_path / "x")])
    assert result.exit_code != 0
    assert result.exception is not None and "does not exist" in str(result.exception)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_a_usage_error(runner, tiny_llama_dir):
    result = runner.invoke(app, ["model-info", "--model", str(tiny_llama_dir), "--device", "cuda"])
    assert result.exit_code == 2
    assert "--device" in result.stderr and "CUDA is not available" in result.stderr


def test_unknown_option_is_exit_2(runner):
    assert runner.invoke(app, ["model-info", "--no-such-option"]).exit_code == 2


def test_the_options_reference_in_docs_is_the_commands_own():
    """docs/cli.md's options reference is what the commands declare (flags, variables,
    defaults, help): regenerate it with `python -m copilot_cli.cli.reference`."""
    from copilot_cli.cli.reference import in_page, reference

    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    assert in_page(page) == reference()


def test_the_options_reference_reads_the_same_from_any_clone():
    """A default inside the shipped data is said from the data's root, never as this clone's
    absolute path (CI clones elsewhere; the page must not depend on where)."""
    from copilot_cli.cli.reference import reference
    from copilot_cli.paths import DATA_ROOT

    text = reference()
    assert str(DATA_ROOT) not in text
    assert "`sample_data/prompts.jsonl`" in text


@pytest.mark.parametrize(("args", "port"), [([], 8012), (["--port", "9001"], 9001)])
def test_serve_bundle_listens_where_the_editors_look_unless_told(
    runner, tmp_path, monkeypatch, args, port
):
    """`serve --bundle` without --port is the endpoint's own port (8012, llama.vscode's first
    guess), not vLLM's server's 8000; a --port given is kept. (The blocking server start is
    replaced by reading the options it would have been given.)"""
    from copilot_cli.serving import endpoint
    from copilot_cli.serving.options import ServeOptions

    (tmp_path / "kv").mkdir()
    (tmp_path / "bundle").mkdir()
    (tmp_path / "chunks.jsonl").write_text("")
    given = []
    monkeypatch.setattr(
        endpoint, "serve_endpoint", lambda flags: given.append(endpoint.endpoint_options(flags))
    )
    base = ["serve", str(tmp_path / "kv"), "--bundle", str(tmp_path / "bundle")]
    result = runner.invoke(app, [*base, "--chunks", str(tmp_path / "chunks.jsonl"), *args])
    assert result.exit_code == 0, result.output
    assert [g.port for g in given] == [port]
    assert ServeOptions(kv_dir=tmp_path / "kv").port == 8000  # vLLM's server keeps its own
