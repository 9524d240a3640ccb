"""The whitespace policy (trim_blocks, lstrip_blocks, keep_trailing_newline) and golden renders."""

from pathlib import Path

import pytest

from copilot_cli.prompts import CompileOptions, compile_templates, load_bundle
from tests.prompts.conftest import write_template

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"


def _render(template_dir, tmp_path, body, **inputs):
    write_template(template_dir, "t.j2", body, samples=[])
    compile_templates(CompileOptions(template_dir, tmp_path / "out"))
    return load_bundle(tmp_path / "out").render("t", **inputs)


def test_block_tags_leave_no_blank_lines_or_indentation(template_dir, tmp_path):
    body = "a\n    {% if x %}\nb {{ x }}\n    {% endif %}\nc\n"
    assert _render(template_dir, tmp_path, body, x="1") == "a\nb 1\nc\n"


def test_trailing_newline_is_kept(template_dir, tmp_path):
    assert _render(template_dir, tmp_path, "{{ x }}\n", x="v") == "v\n"


def test_expression_tags_keep_their_newline(template_dir, tmp_path):
    assert _render(template_dir, tmp_path, "{{ x }}\n{{ x }}", x="v") == "v\nv"


def test_tojson_does_not_html_escape(template_dir, tmp_path):
    inputs = {"type": "object", "properties": {"x": {"type": "object"}}}
    write_template(template_dir, "t.j2", "{{ x | tojson }}", inputs=inputs, samples=[])
    compile_templates(CompileOptions(template_dir, tmp_path / "out"))
    text = load_bundle(tmp_path / "out").render("t", x={"a": "<b> & 'c' ü"})
    assert text == '{"a": "<b> & \'c\' ü"}'


def test_no_autoescape(template_dir, tmp_path):
    assert _render(template_dir, tmp_path, "{{ x }}", x="<a href='x'>&</a>") == "<a href='x'>&</a>"


@pytest.fixture(scope="module")
def shipped_bundle(tmp_path_factory, tokenizer):
    out = tmp_path_factory.mktemp("bundle")
    compile_templates(CompileOptions(REPO / "templates", out), tokenizer)
    return load_bundle(out)


@pytest.mark.parametrize(
    "name",
    ["bug-fix", "code-completion", "docstring", "review-comment", "sql-to-python", "unit-tests"],
)
def test_shipped_templates_match_golden_renders(shipped_bundle, name):
    import yaml

    source = (REPO / "templates" / (name.replace("-", "_") + ".j2")).read_text()
    sample = yaml.safe_load(source.split("---")[1])["samples"][0]
    golden = (GOLDEN / f"{name}.txt").read_text(encoding="utf-8")
    assert shipped_bundle.render(name, **sample) == golden
