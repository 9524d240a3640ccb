"""Engines inside the options contract: one table (core/engines.py) says which command runs on
which engine and which settings an engine does not honour; those are refused with one line
naming the flag (exit 2, nothing written), from the CLI and the library alike."""

from __future__ import annotations

import pytest

from copilot_cli.cli import app
from copilot_cli.core.engines import ENGINES, engines_for
from copilot_cli.core.options import OptionError
from copilot_cli.kv import PrefillOptions

PREFILL_IGNORED = [
    (["--verify"], "--verify"),
    (["--ray", "local"], "--ray"),
    (["--dtype", "float32"], "--dtype"),
    (["--block-size", "32"], "--block-size"),
    (["--chunk-size", "128"], "--chunk-size"),
]


@pytest.mark.parametrize(("flags", "named"), PREFILL_IGNORED)
def test_prefill_flags_llama_cpp_ignores_are_refused(runner, tmp_path, flags, named):
    out = tmp_path / "slots"
    args = ["prefill-kv", "--text", __file__, "-o", str(out), "--engine", "llama.cpp", *flags]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert (
        result.stderr.strip() == f"error: {named}: not honoured by --engine llama.cpp: leave it out"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--max-bytes", "5"], "--max-bytes"),
        (["--no-preload"], "--no-preload"),
        (["--", "--enforce-eager"], "arguments after --"),
    ],
)
def test_serve_flags_llama_cpp_ignores_are_refused(runner, tmp_path, flags, named):
    args = ["serve", str(tmp_path), "--engine", "llama.cpp", *flags]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"error: {named}: not honoured by --engine llama.cpp" in result.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["prefill-kv", "--text", __file__, "--engine", "vllm"],
            "prefill-kv runs on transformers, llama.cpp",
        ),
        (["serve", ".", "--engine", "transformers"], "serve runs on vllm, llama.cpp"),
    ],
)
def test_an_engine_a_command_does_not_run_on_is_named_with_the_choices(runner, args, says):
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and says in result.stderr


def test_the_library_refuses_as_the_cli_does():
    with pytest.raises(OptionError) as info:
        PrefillOptions(engine="llama.cpp", block_size=32)
    assert info.value.option == "block_size"
    assert PrefillOptions(engine="llama.cpp").engine == "llama.cpp"  # defaults are honoured


def test_every_engine_list_is_the_table():
    from copilot_cli.regress.options import ENGINES as REGRESS
    from copilot_cli.serving.options import ENDPOINT_ENGINES

    assert engines_for("regress") == REGRESS and engines_for("endpoint") == ENDPOINT_ENGINES
    assert set(engines_for("prefill-kv")) == {"transformers", "llama.cpp"}
    for engine in ENGINES.values():
        for command, fields in engine.ignores.items():
            assert command in engine.commands, (engine.name, command)
            assert fields, (engine.name, command)


def test_llama_cpp_missing_is_one_line(runner, tmp_path):
    """This venv has no llama-cpp-python: the slot producer says so (exit 2), after its checks."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("llama-cpp-python is installed here")
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    args = ["prefill-kv", "--text", __file__, "-o", str(tmp_path / "s"), "--engine", "llama.cpp"]
    result = runner.invoke(app, [*args, "--model", str(gguf)])
    assert result.exit_code == 2, result.output
    assert "llama-cpp-python is not installed here" in result.stderr
