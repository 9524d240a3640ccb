"""compile-templates: validation errors, all-or-nothing writes, incremental rebuilds."""

import hashlib
from pathlib import Path

import pytest

from copilot_cli.prompts import CompileOptions, TemplateError, compile_templates, load_bundle
from tests.prompts.conftest import write_template

REPO = Path(__file__).resolve().parents[2]


def _snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(folder)): (
            hashlib.sha256(p.read_bytes()).hexdigest(),
            p.stat().st_mtime_ns,
        )
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_syntax_error_names_file_and_line(template_dir, tmp_path):
    write_template(template_dir, "broken.j2", "line one\nline two {% if %}\nline three\n")
    with pytest.raises(TemplateError) as info:
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))
    # front matter takes lines 1-10 of the file; the bad tag is on body line 2
    assert info.value.file == "broken.j2"
    assert (
        info.value.line
        == (template_dir / "broken.j2").read_text().splitlines().index("line two {% if %}") + 1
    )


def test_syntax_error_in_a_part_names_the_part(template_dir, tmp_path):
    (template_dir / "parts").mkdir()
    (template_dir / "parts" / "bad.j2").write_text("ok\n{% if %}\n")
    write_template(template_dir, "t.j2", '{% include "parts/bad.j2" %}{{ x }}')
    with pytest.raises(TemplateError) as info:
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))
    assert (info.value.file, info.value.line) == ("parts/bad.j2", 2)


def test_undeclared_variable_is_named(template_dir, tmp_path):
    write_template(template_dir, "t.j2", "{{ x }} and {{ secret_thing }}")
    with pytest.raises(TemplateError, match="'secret_thing' is used but not declared"):
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))


def test_undeclared_variable_inside_an_include_is_found(template_dir, tmp_path):
    (template_dir / "parts").mkdir()
    (template_dir / "parts" / "p.j2").write_text("{{ hidden }}")
    write_template(template_dir, "t.j2", '{% include "parts/p.j2" %}{{ x }}')
    with pytest.raises(TemplateError, match="'hidden'"):
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))


def test_declared_but_unused_is_a_warning(template_dir, tmp_path):
    inputs = {"type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "string"}}}
    write_template(template_dir, "t.j2", "{{ x }}", inputs=inputs)
    result = compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))
    assert any("'y' is declared but never used" in w for w in result.warnings)


def test_schema_invalid_sample_gives_the_json_path(template_dir, tmp_path):
    inputs = {
        "type": "object",
        "properties": {"x": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    }
    write_template(
        template_dir,
        "t.j2",
        "{{ x }}",
        inputs=inputs,
        samples=[{"x": {"n": 1}}, {"x": {"n": "one"}}],
    )
    with pytest.raises(TemplateError, match=r"samples\[1\]\.x\.n: 'one' is not of type 'integer'"):
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))


def test_sample_that_fails_to_render_names_the_line(template_dir, tmp_path):
    write_template(template_dir, "t.j2", "ok\n{{ x.missing.deeper }}\n")
    with pytest.raises(TemplateError, match="samples\\[0\\] fails to render") as info:
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))
    assert info.value.line is not None


def test_non_utf8_template(template_dir, tmp_path):
    (template_dir / "latin.j2").write_bytes(b"---\nname: x\n---\ncaf\xe9 {{ x }}\n")
    with pytest.raises(TemplateError, match="not UTF-8") as info:
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))
    assert info.value.file == "latin.j2"


def test_duplicate_names(template_dir, tmp_path):
    write_template(template_dir, "a.j2", "{{ x }}", name="same")
    write_template(template_dir, "b.j2", "{{ x }}", name="same")
    with pytest.raises(TemplateError, match=r"'same' is also used by a\.j2"):
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))


@pytest.mark.parametrize(
    "name",
    ["../../../../victim/notes", "/etc/passwd", "a/b", "a\\b", "..", ".hidden", "a..b", "x" * 101],
)
def test_a_template_name_that_could_be_a_path_is_refused(template_dir, tmp_path, name):
    write_template(template_dir, "t.j2", "{{ x }}", name=name)
    with pytest.raises(TemplateError, match="is not a template name") as info:
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))
    assert info.value.file == "t.j2" and not (tmp_path / "out").exists()


def test_names_of_letters_digits_dots_and_dashes_compile(template_dir, tmp_path):
    write_template(template_dir, "t.j2", "{{ x }}", name="Code_completion-2.1")
    result = compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))
    assert [t.name for t in result.templates] == ["Code_completion-2.1"]


def test_missing_front_matter_and_unknown_key(template_dir, tmp_path):
    (template_dir / "plain.j2").write_text("{{ x }}")
    with pytest.raises(TemplateError, match="front matter"):
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))
    (template_dir / "plain.j2").write_text(
        "---\nname: a\ndescription: d\nversion: 1\ninputs: {}\nfavourite: 1\n---\nx"
    )
    with pytest.raises(TemplateError, match="unknown front matter key 'favourite'"):
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))


def test_dynamic_include_is_refused(template_dir, tmp_path):
    write_template(template_dir, "t.j2", "{% include x %}")
    with pytest.raises(TemplateError, match="constant"):
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))


def test_failure_leaves_the_previous_bundle_untouched(template_dir, tmp_path):
    write_template(template_dir, "a.j2", "A {{ x }}")
    out = tmp_path / "out"
    compile_templates(CompileOptions(template_dir, out))
    before = _snapshot(out)
    write_template(template_dir, "a.j2", "A changed {{ x }}")
    write_template(template_dir, "b.j2", "{{ undeclared }}")
    with pytest.raises(TemplateError):
        compile_templates(CompileOptions(template_dir, out))
    assert _snapshot(out) == before
    assert load_bundle(out).render("a", x="1") == "A 1"


def test_recompiling_an_unchanged_folder_writes_nothing(tmp_path, tokenizer):
    out = tmp_path / "out"
    first = compile_templates(CompileOptions(REPO / "templates", out), tokenizer)
    assert "manifest.json" in first.files_written
    before = _snapshot(out)
    second = compile_templates(CompileOptions(REPO / "templates", out), tokenizer)
    assert second.files_written == []
    assert {t.status for t in second.templates} == {"unchanged"}
    assert _snapshot(out) == before


def test_changing_a_part_recompiles_only_its_users(tmp_path, tokenizer):
    import shutil

    src = shutil.copytree(REPO / "templates", tmp_path / "templates")
    out = tmp_path / "out"
    compile_templates(CompileOptions(src, out), tokenizer)
    example = src / "parts" / "examples" / "docstring.j2"
    example.write_text(example.read_text() + "One more line.\n")
    result = compile_templates(CompileOptions(src, out), tokenizer)
    status = {t.name: t.status for t in result.templates}
    assert status.pop("docstring") == "compiled"
    assert set(status.values()) == {"unchanged"}


def test_same_inputs_give_byte_identical_bundles(tmp_path, tokenizer):
    compile_templates(CompileOptions(REPO / "templates", tmp_path / "a"), tokenizer)
    compile_templates(CompileOptions(REPO / "templates", tmp_path / "b"), tokenizer)
    a = {k: v[0] for k, v in _snapshot(tmp_path / "a").items()}
    b = {k: v[0] for k, v in _snapshot(tmp_path / "b").items()}
    assert a == b


def test_manifest_records_what_the_issue_asks(tmp_path, tokenizer):
    import json

    from copilot_cli.core.fingerprints import tokenizer_fingerprint

    compile_templates(CompileOptions(REPO / "templates", tmp_path / "out"), tokenizer)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["format"] == "copilot-opt.prompt-bundle" and manifest["format_version"] == 2
    assert manifest["environment"]["trim_blocks"] is True
    assert len(manifest["templates"]) >= 6
    for entry in manifest["templates"]:
        for key in (
            "name",
            "source",
            "content_hash",
            "parts",
            "variables",
            "schema",
            "static_prefix",
            "static_prefix_sha256",
            "static_prefix_tokens",
        ):
            assert key in entry
        assert entry["tokenizer_fingerprint"] == tokenizer_fingerprint(tokenizer)
        assert entry["static_prefix_tokens"] >= 64
        assert (
            hashlib.sha256(entry["static_prefix"].encode()).hexdigest()
            == entry["static_prefix_sha256"]
        )
    shared = [set(e["parts"]) for e in manifest["templates"]]
    assert sum("parts/role.j2" in p for p in shared) >= 4  # several share the role part
