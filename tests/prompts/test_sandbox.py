"""Templates cannot reach Python internals, files outside the folder, or unbounded memory."""

import os
import tracemalloc
from pathlib import Path

import pytest

from copilot_cli.core.errors import InputError
from copilot_cli.prompts import CompileOptions, TemplateError, compile_templates
from tests.prompts.conftest import write_template

PAYLOADS = [
    "{{ lipsum.__globals__['os'].popen('touch PWNED').read() }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.popen('touch PWNED').read() }}",
    "{{ joiner.__init__.__globals__ }}",
    "{{ self.__init__.__globals__ }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ range.__self__ }}",
    "{{ x.__class__.__base__.__subclasses__() }}",
    "{% set l = [] %}{{ l.append(1) }}",
    "{{ ().__class__.__bases__[0].__subclasses__() }}",
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_escape_payloads_fail_and_execute_nothing(template_dir, tmp_path, payload, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_template(template_dir, "evil.j2", payload + "{{ x }}")
    with pytest.raises(TemplateError) as info:
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))
    assert "evil.j2" in str(info.value)
    assert not (tmp_path / "PWNED").exists()
    assert not (tmp_path / "out").exists()


def test_include_outside_the_folder_is_refused(template_dir, tmp_path):
    (tmp_path / "secret.j2").write_text("SECRET")
    write_template(template_dir, "t.j2", '{% include "../secret.j2" %}{{ x }}')
    with pytest.raises(TemplateError, match="parts/"):
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))


def test_symlinked_part_leading_outside_is_refused(template_dir, tmp_path):
    (tmp_path / "secret.j2").write_text("SECRET")
    (template_dir / "parts").mkdir()
    os.symlink(tmp_path / "secret.j2", template_dir / "parts" / "link.j2")
    write_template(template_dir, "t.j2", '{% include "parts/link.j2" %}{{ x }}')
    with pytest.raises(TemplateError):
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))


@pytest.mark.parametrize(
    "body",
    [
        "{{ 'x' * 10**9 }}",
        "{{ x * 10**9 }}",
        "{{ 'x'.ljust(10**9) }}",
        "{{ 'x' | center(10**9) }}",
        "{{ '{:>999999999}'.format(1) }}",
        "{{ 2 ** 100000000 }}",
        "{{ '%999999999d' % 1 }}",
        "{{ '{:>{w}}'.format(1, w=10**9) }}",
        "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
    ],
)
def test_huge_outputs_fail_fast_in_bounded_memory(template_dir, tmp_path, body):
    write_template(template_dir, "t.j2", body + "{{ x }}")
    tracemalloc.start()
    try:
        with pytest.raises(TemplateError, match=r"t\.j2"):
            compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_missing_folder_and_empty_folder(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        compile_templates(CompileOptions(tmp_path / "nope", tmp_path / "out"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no templates"):
        compile_templates(CompileOptions(tmp_path / "empty", tmp_path / "out"))


# Work that produces little or no output but would run for hours or fill memory: each class
# the hostile review found, plus its cousins. Each must stop at a limit, naming file:line.
WORK_BOMBS = [
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000)|list %}{% endfor %}{% endfor %}",
    "{% for i in range(100000)|map('string') %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
    "{{ 9**9**9**9**9**9**9**9 }}",  # left-associative: each step multiplies the bits by 9
    "{{ 9 ** (9 ** 9) }}",
    "{{ (10**4000) * (10**4000) * (10**4000) * (10**4000) * (10**4000) * (10**4000) }}",
    "{% set s = 'ab' * 100000 %}{{ s | replace('a', s) | length }}",
    "{{ 'xxxxxxxxxx' | replace('x', 'xxxxxxxxxx') | replace('x', 'xxxxxxxxxx') "
    "| replace('x', 'xxxxxxxxxx') | replace('x', 'xxxxxxxxxx') | replace('x', 'xxxxxxxxxx') "
    "| replace('x', 'xxxxxxxxxx') | length }}",
    "{{ ('x' * 900000).replace('x', 'yy') | length }}",
    "{{ range(100000) | join('x' * 999999) | length }}",
    "{{ range(100000) | map('string') | join('x' * 999999) | length }}",
    "{{ ('x' * 999999).join(range(100000) | map('string')) | length }}",
    "{{ ('x\\n' * 400000) | indent(999999) | length }}",
    "{{ ('x\\n' * 400000) | indent('y' * 999999) | length }}",
    "{{ ('x' * 999999) | wordwrap(1, wrapstring='y' * 999999) | length }}",
    "{{ ('%999999s' * 2) % (1, 2) }}",
    "{{ '%*s%*s' % (999999, 'x', 999999, 'y') }}",
    "{{ '%s' | format('x' * 999999) | length }}{{ ('%s%s' | format('x' * 999999, 'y' * 999999)) }}",
    "{% set a = 'x' * 999999 %}{% set b = a ~ a %}{{ b | length }}",
    "{% set a = 'x' * 999999 %}{% set b = a + a %}{{ b | length }}",
    "{% set a = ('x' * 999999) | list %}{% set b = a + a %}{{ b | length }}",
    "{{ [0] | batch(10**9, 0) | list | length }}",
    "{{ [0] | slice(10**9) | list | length }}",
    "{{ {'k': range(100000) | list} | tojson(indent=10**6) | length }}",
    "{% macro f(n) %}{% for i in range(2) %}{{ f(n + 1) }}{% endfor %}{% endmacro %}{{ f(0) }}",
    "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "{% for i in [[1, [2, [3]]]] * 100000 recursive %}{{ loop(range(1000)) }}{% endfor %}",
]


def _refused_bomb(template_dir: Path, tmp_path: Path, body: str) -> tuple[str, int, int]:
    """Compile a template whose line after `intro` is `body`: the refusal (it must be one),
    that line's number, and the peak of traced memory while compiling."""
    path = write_template(template_dir, "bomb.j2", "intro\n" + body + "{{ x }}")
    body_line = path.read_text().splitlines().index("intro") + 2
    tracemalloc.start()
    try:
        with pytest.raises(TemplateError) as info:
            compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not (tmp_path / "out").exists()
    return str(info.value), body_line, peak


@pytest.mark.parametrize("body", WORK_BOMBS)
def test_work_bombs_stop_at_compile_naming_the_line(template_dir, tmp_path, body):
    error, body_line, peak = _refused_bomb(template_dir, tmp_path, body)
    assert f"bomb.j2:{body_line}" in error
    assert peak < 256 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_the_time_budget_stops_slow_work_that_passes_every_other_limit(template_dir, tmp_path):
    from copilot_cli.prompts import RenderLimits

    body = "{% for i in range(2000) %}{{ range(50000) | list | sort | length }}{% endfor %}"
    write_template(template_dir, "slow.j2", body + "{{ x }}")
    limits = RenderLimits(max_seconds=0.2)
    with pytest.raises(TemplateError, match=r"slow\.j2:\d+.*longer than 0\.2 s"):
        compile_templates(
            CompileOptions(template_dir, tmp_path / "out", limits=limits, use_tokenizer=False)
        )


RENDER_BOMB = (
    "Header\n"
    "{% for i in range(n) %}{% for j in range(n) %}{% endfor %}{% endfor %}"
    "{{ text | indent(width) }}\n"
)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"n": 100000, "text": "a", "width": 1}, "iterations"),
        ({"n": 1, "text": "a\n" * 400000, "width": 999999}, "indent"),
    ],
)
def test_bombs_that_only_inputs_trigger_exit_2_at_render(
    runner, template_dir, tmp_path, inputs, message
):
    import json

    from copilot_cli.cli import app

    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "text": {"type": "string"},
            "width": {"type": "integer"},
        },
        "required": ["n", "text", "width"],
    }
    write_template(
        template_dir,
        "hostile.j2",
        RENDER_BOMB,
        inputs=schema,
        samples=[{"n": 2, "text": "ok", "width": 2}],
    )
    out = tmp_path / "bundle"
    assert (
        runner.invoke(
            app, ["compile-templates", str(template_dir), "-o", str(out), "--no-tokenizer"]
        ).exit_code
        == 0
    )
    (tmp_path / "in.json").write_text(json.dumps(inputs))
    result = runner.invoke(app, ["render", str(out), "hostile", "-i", str(tmp_path / "in.json")])
    assert result.exit_code == 2, result.output
    assert "hostile.j2:" in result.stderr and message in result.stderr
    assert "Traceback" not in result.output


def test_normal_templates_render_unchanged_under_the_limits(tmp_path, tokenizer):
    from copilot_cli.prompts import load_bundle

    repo = Path(__file__).resolve().parents[2]
    compile_templates(CompileOptions(repo / "templates", tmp_path / "b"), tokenizer)
    bundle = load_bundle(tmp_path / "b")
    text = bundle.render("code-completion", language="python", code_before="def f():\n")
    assert text.startswith(bundle.static_prefix("code-completion")) and "def f():" in text


MACRO_BOMBS = [
    # text that never reaches the output directly: built inside macros and set blocks
    "{% macro m() %}{% for i in range(1000) %}{{ 'x' * 999999 }}{% endfor %}{% endmacro %}"
    "{% set a = m() %}{{ a | length }}",
    "{% set a %}{% for i in range(1000) %}{{ ('x' * 999999) | list }}{% endfor %}{% endset %}"
    "{{ a | length }}",
    "{% macro m() %}{% for i in range(1000) %}{% for j in range(9) %}"
    + "0123456789" * 400
    + "{% endfor %}{% endfor %}{% endmacro %}{{ m() | length }}",
]


@pytest.mark.parametrize("body", MACRO_BOMBS)
def test_text_built_inside_macros_and_blocks_is_bounded(template_dir, tmp_path, body):
    write_template(template_dir, "bomb.j2", body + "{{ x }}")
    tracemalloc.start()
    try:
        with pytest.raises(TemplateError, match=r"bomb\.j2:\d+"):
            compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_a_linked_subfolder_leading_out_of_the_folder_is_refused(template_dir, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.j2").write_text("SECRET {{ x }}")
    write_template(template_dir, "t.j2", "{{ x }}")
    os.symlink(outside, template_dir / "parts")
    with pytest.raises(TemplateError, match="parts: is a link that resolves outside"):
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))
    assert not (tmp_path / "out").exists()


def test_a_link_loop_is_refused_naming_the_link(template_dir, tmp_path):
    write_template(template_dir, "t.j2", "{{ x }}")
    (template_dir / "sub").mkdir()
    os.symlink("..", template_dir / "sub" / "back")
    with pytest.raises(TemplateError, match="sub/back: is a link that loops"):
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))


def test_links_inside_the_folder_are_followed_and_reported(template_dir, tmp_path, runner):
    from copilot_cli.cli import app

    (template_dir / "shared").mkdir()
    (template_dir / "shared" / "role.txt").write_text("You are helpful.\n")
    (template_dir / "parts").mkdir()
    os.symlink("../shared/role.txt", template_dir / "parts" / "role.j2")
    write_template(template_dir, "t.j2", '{% include "parts/role.j2" %}{{ x }}')
    result = runner.invoke(
        app,
        [
            "compile-templates",
            str(template_dir),
            "-o",
            str(tmp_path / "o"),
            "--no-tokenizer",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    import json

    assert json.loads(result.stdout)["links"] == {"parts/role.j2": "shared/role.txt"}


# Values whose text is far larger than the value: each must be refused from an estimate,
# before the text is built (the first hostile review found each building 0.5-1.1 GB first).
S = "{% set s = 'x' * 999999 %}"
SIZED_BEFORE_BUILT = [
    "{{ ([[0] * 2000] * 2000) | sum(start=[]) | length }}",  # also quadratic: 68 s before
    S + "{{ ([s] * 300) | string | length }}",
    S + "{{ ([s] * 300) | tojson | length }}",
    S + "{{ ([s] * 300) | pprint | length }}",
    "{{ 'a' | center(999999) | list | string | length }}",
    S + "{{ ([s] * 300) | map('urlencode') | join | length }}",
    S + "{{ {'a': s, 'b': s, 'c': s} | xmlattr | length }}",
    "{{ ('{0:>999999}' * 300).format(1) | length }}",
    S + "{{ [s] * 300 }}",
    S + "{{ (([s] * 300) ~ '') | length }}",
    S + "{{ ([{'a': s}] * 300) | join(attribute='a') | length }}",
    S + "{{ ({'a': [s] * 300}) | dictsort }}",
    S + "{{ ([s] * 300) | batch(3) | list }}",
]


@pytest.mark.parametrize("body", SIZED_BEFORE_BUILT)
def test_text_of_a_value_is_sized_before_it_is_built(template_dir, tmp_path, body):
    error, body_line, peak = _refused_bomb(template_dir, tmp_path, body)
    assert f"bomb.j2:{body_line}" in error
    assert peak < 48 * 2**20, f"peak {peak / 2**20:.0f} MiB"  # s itself is 1 MB


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{{ " + "9" * 100_000 + " }}", "number literal"),
        ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "brackets nested"),
        ("{{ " + " + ".join(["'ab'"] * 300) + " }}", "expression nested"),
        ("{% if x %}" * 200 + "y" + "{% endif %}" * 200, "blocks nested"),
    ],
)
def test_shapes_that_would_break_the_parser_are_syntax_errors_with_a_line(
    template_dir, tmp_path, body, message
):
    path = write_template(template_dir, "deep.j2", "intro\n" + body + "{{ x }}")
    body_line = path.read_text().splitlines().index("intro") + 2
    with pytest.raises(TemplateError) as info:
        compile_templates(CompileOptions(template_dir, tmp_path / "out", use_tokenizer=False))
    assert f"deep.j2:{body_line}" in str(info.value) and message in str(info.value)


def test_constant_expressions_are_not_folded_at_compile_time():
    from copilot_cli.prompts.sandbox import make_environment

    tracemalloc.start()
    try:
        make_environment().from_string("{{ 'a' | center(999999) | list }}")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"peak {peak / 2**20:.0f} MiB"  # folded: a million-item literal


def test_sum_of_lists_is_one_pass_and_right():
    from copilot_cli.prompts.limits import RenderLimits
    from copilot_cli.prompts.sandbox import bounded_render, make_environment

    template = make_environment().from_string(
        "{{ ([[1, 2]] * 3) | sum(start=[0]) }} {{ [(1,), (2,)] | sum(start=()) }} "
        "{{ [1, 2, 3] | sum }} {{ [{'n': 2}, {'n': 5}] | sum(attribute='n') }}"
    )
    assert bounded_render(template, {}, RenderLimits()) == "[0, 1, 2, 1, 2, 1, 2] (1, 2) 6 7"


def test_chat_templates_get_no_lipsum():
    from copilot_cli.prompts.chat import chat_environment

    assert "lipsum" not in chat_environment().globals


def test_join_sizes_items_that_are_not_text_without_building_them(template_dir, tmp_path):
    body = S + "{{ [[s] * 300] | join | length }}"
    error, body_line, peak = _refused_bomb(template_dir, tmp_path, body)
    assert f"bomb.j2:{body_line}" in error and "filter join" in error
    assert peak < 48 * 2**20, f"peak {peak / 2**20:.0f} MiB"
