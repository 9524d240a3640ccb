"""The runtime side: load_bundle, render with validation, LRU, chat format, CLI."""

import json
from pathlib import Path

import jinja2
import pytest

from copilot_cli.cli import app
from copilot_cli.core.errors import ArtifactError
from copilot_cli.prompts import CompileOptions, InputsError, compile_templates, load_bundle

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory, tokenizer):
    out = tmp_path_factory.mktemp("bundle")
    compile_templates(CompileOptions(REPO / "templates", out), tokenizer)
    return out


def test_templates_and_prefixes(bundle_dir):
    bundle = load_bundle(bundle_dir)
    assert len(bundle.templates()) >= 6
    for name in bundle.templates():
        assert bundle.static_prefix(name).startswith(("You are CodePilot", "<|bos|><|system|>"))


def test_loading_and_rendering_never_parses_template_sources(bundle_dir, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a template source was parsed")

    monkeypatch.setattr(jinja2.Environment, "parse", refuse)
    monkeypatch.setattr(jinja2.Environment, "_parse", refuse)
    bundle = load_bundle(bundle_dir)
    text = bundle.render("sql-to-python", sql="SELECT 1", tables={"t": ["a"]})
    assert text.startswith(bundle.static_prefix("sql-to-python"))


def test_render_validates_inputs_with_a_json_path(bundle_dir):
    bundle = load_bundle(bundle_dir)
    with pytest.raises(InputsError) as info:
        bundle.render("sql-to-python", sql="SELECT 1", tables={"t": [1]})
    assert info.value.path == "$.tables.t[0]"
    with pytest.raises(InputsError, match="'sql' is a required property"):
        bundle.render("sql-to-python", tables={})


def test_chat_format_matches_the_tokenizer_chat_template(bundle_dir, tokenizer):
    bundle = load_bundle(bundle_dir)
    text = bundle.render("review-comment", diff="+x = 1\n", focus="readability")
    system_body = bundle.static_prefix("review-comment")
    assert text.startswith(system_body)
    assert text.endswith("<|assistant|>\n")
    assert "focusing on readability" in text


def test_bundle_caches_compiled_templates(bundle_dir):
    bundle = load_bundle(bundle_dir)
    bundle.render("docstring", code="x = 1")
    runtime = bundle._runtime
    before = runtime.template.cache_info().hits
    bundle.render("docstring", code="y = 2")
    assert runtime.template.cache_info().hits == before + 1


def test_corrupt_source_file_is_refused(bundle_dir, tmp_path):
    import shutil

    copy = shutil.copytree(bundle_dir, tmp_path / "copy")
    victim = next((copy / "sources").glob("*.j2"))
    victim.write_text(victim.read_text() + "\n{# tampered #}\n")
    with pytest.raises(ArtifactError, match="corrupt"):
        load_bundle(copy)


def test_unknown_format_version_is_refused(bundle_dir, tmp_path):
    import shutil

    copy = shutil.copytree(bundle_dir, tmp_path / "copy")
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["format_version"] = 99
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="format_version 99"):
        load_bundle(copy)


def test_cli_compile_and_render(runner, tmp_path):
    out = tmp_path / "bundle"
    result = runner.invoke(
        app, ["compile-templates", str(REPO / "templates"), "-o", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert {t["name"] for t in report["templates"]} >= {"code-completion", "bug-fix"}

    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps({"language": "python", "code_before": "def f():\n"}))
    result = runner.invoke(
        app, ["render", str(out), "code-completion", "--inputs", str(inputs), "--json"]
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["static_prefix"] + payload["rest"] == payload["text"]
    assert payload["prefix_tokens"] >= 64 and payload["rest_tokens"] > 0
    assert payload["total_tokens"] == payload["prefix_tokens"] + payload["rest_tokens"]

    result = runner.invoke(
        app,
        ["render", str(out), "code-completion", "--inputs", "-"],
        input='{"language": "cobol", "code_before": ""}',
    )
    assert result.exit_code == 2
    assert "$.language" in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{{ x ", "t.j2:"),
        ("{{ undeclared_name }}", "undeclared_name"),
        ("{{ ''.__class__.__mro__ }}{{ x }}", "unsafe"),
    ],
)
def test_cli_bad_templates_exit_2_with_one_line(runner, tmp_path, body, message):
    from tests.prompts.conftest import write_template

    src = tmp_path / "src"
    write_template(src, "t.j2", body)
    result = runner.invoke(
        app, ["compile-templates", str(src), "-o", str(tmp_path / "o"), "--no-tokenizer"]
    )
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_cli_empty_folder_exit_2(runner, tmp_path):
    (tmp_path / "empty").mkdir()
    result = runner.invoke(
        app,
        ["compile-templates", str(tmp_path / "empty"), "-o", str(tmp_path / "o"), "--no-tokenizer"],
    )
    assert result.exit_code == 2 and "no templates" in result.stderr
