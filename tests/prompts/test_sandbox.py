"""Templates cannot reach Python internals, files outside the folder, or unbounded memory."""

import os
import tracemalloc

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
        compile_templates(CompileOptions(template_dir, tmp_path / "out"))
    assert "evil.j2" in str(info.value)
    assert not (tmp_path / "PWNED").exists()
    assert not (tmp_path / "out").exists()


def test_include_outside_the_folder_is_refused(template_dir, tmp_path):
    (tmp_path / "secret.j2").write_text("SECRET")
    write_template(template_dir, "t.j2", '{% include "../secret.j2" %}{{ x }}')
    with pytest.raises(TemplateError, match="parts/"):
        compile_templates(CompileOptions(template_dir, tmp_path / "out"))


def test_symlinked_part_leading_outside_is_refused(template_dir, tmp_path):
    (tmp_path / "secret.j2").write_text("SECRET")
    (template_dir / "parts").mkdir()
    os.symlink(tmp_path / "secret.j2", template_dir / "parts" / "link.j2")
    write_template(template_dir, "t.j2", '{% include "parts/link.j2" %}{{ x }}')
    with pytest.raises(TemplateError):
        compile_templates(CompileOptions(template_dir, tmp_path / "out"))


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
            compile_templates(CompileOptions(template_dir, tmp_path / "out"))
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
