"""Static prefixes come from the syntax tree, hold for every input, split on token boundaries."""

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from copilot_cli.core.tokens import continuation_ids, prompt_ids
from copilot_cli.prompts import CompileOptions, compile_templates, load_bundle
from tests.prompts.conftest import write_template


def _compile(template_dir, out, tokenizer=None):
    options = CompileOptions(template_dir, out, use_tokenizer=tokenizer is not None)
    return compile_templates(options, tokenizer)


def _prefix(template_dir, tmp_path, body, **kw):
    write_template(template_dir, "t.j2", body, **kw)
    _compile(template_dir, tmp_path / "out")
    return load_bundle(tmp_path / "out").static_prefix("t")


def test_prefix_stops_at_the_first_input(template_dir, tmp_path):
    assert _prefix(template_dir, tmp_path, "Hello.\nInput: {{ x }}\nBye.\n") == "Hello.\nInput: "


def test_constants_and_constant_branches_fold(template_dir, tmp_path):
    body = "A{{ 1 + 1 }}{% if true %}B{% else %}C{% endif %}{{ 'd' | upper }}{{ x }}"
    assert _prefix(template_dir, tmp_path, body) == "A2BD"


def test_includes_are_inlined(template_dir, tmp_path):
    (template_dir / "parts").mkdir()
    (template_dir / "parts" / "role.j2").write_text("ROLE\n")
    (template_dir / "parts" / "outer.j2").write_text('{% include "parts/role.j2" %}OUTER\n')
    body = '{% include "parts/outer.j2" %}tail {{ x }}'
    assert _prefix(template_dir, tmp_path, body) == "ROLE\nOUTER\ntail "


def test_extends_resolves_blocks_of_the_layout(template_dir, tmp_path):
    (template_dir / "parts").mkdir()
    (template_dir / "parts" / "base.j2").write_text(
        "HEAD\n{% block a %}default-a{% endblock %}|{% block b %}default-b{% endblock %}|END"
    )
    body = '{% extends "parts/base.j2" %}{% block b %}B={{ x }}{% endblock %}'
    assert _prefix(template_dir, tmp_path, body) == "HEAD\ndefault-a|B="


def test_a_loop_or_random_value_ends_the_prefix(template_dir, tmp_path):
    assert _prefix(template_dir, tmp_path, "A{% for i in [1] %}{{ i }}{% endfor %}{{ x }}") == "A"
    write_template(template_dir, "t.j2", "A{{ [1, 2] | random }}{{ x }}")
    result = _compile(template_dir, tmp_path / "out2")
    assert load_bundle(tmp_path / "out2").static_prefix("t") == "A"
    assert any("volatile" in w for w in result.warnings)


def test_a_date_in_the_prefix_is_warned_about(template_dir, tmp_path):
    write_template(template_dir, "t.j2", "Today is 2026-12-02.\n{{ x }}")
    result = _compile(template_dir, tmp_path / "out")
    assert any("volatile" in w for w in result.warnings)


def test_short_prefix_is_warned_about(template_dir, tmp_path, tokenizer):
    write_template(template_dir, "t.j2", "Hi {{ x }}")
    result = _compile(template_dir, tmp_path / "out", tokenizer)
    assert any("only 1 tokens" in w or "only 2 tokens" in w for w in result.warnings)


def test_boundary_is_shortened_until_split_tokenization_is_exact(template_dir, tmp_path, tokenizer):
    # "\n" followed by indentation merges into one BPE token; a prefix ending in "\n" whose
    # rest starts with spaces would not split cleanly.
    body = "def outer():\n    value = 1\n{{ x }}"
    samples = [{"x": "    return value\n"}, {"x": "    pass\n"}]
    write_template(template_dir, "t.j2", body, samples=samples)
    result = _compile(template_dir, tmp_path / "out", tokenizer)
    bundle = load_bundle(tmp_path / "out")
    prefix = bundle.static_prefix("t")
    assert result.templates[0].shortened_chars > 0
    assert "def outer():\n    value = 1\n".startswith(prefix)
    for sample in samples:
        text = bundle.render("t", **sample)
        split = prompt_ids(tokenizer, prefix) + continuation_ids(tokenizer, text[len(prefix) :])
        assert split == prompt_ids(tokenizer, text)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=st.text(alphabet=string.printable + "éü✓", max_size=40))
def test_every_valid_input_renders_after_the_prefix(tmp_path_factory, value):
    folder = tmp_path_factory.mktemp("t")
    write_template(
        folder, "t.j2", "Fixed header.\n{% if x %}X={{ x }}{% endif %}\nend\n", samples=[{"x": "a"}]
    )
    out = tmp_path_factory.mktemp("out")
    compile_templates(CompileOptions(folder, out))
    bundle = load_bundle(out)
    rendered = bundle.split("t", x=value)
    assert rendered.text.startswith(bundle.static_prefix("t"))
    assert rendered.static_prefix + rendered.rest == rendered.text
