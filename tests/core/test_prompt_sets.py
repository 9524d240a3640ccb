"""Prompt sets are read into typed cases once: ids as text, the task defaulted, the other
fields kept, and the baseline hash unchanged from the dict form it replaced."""

import hashlib
import json

import pytest

from copilot_cli.core.errors import InputError
from copilot_cli.core.prompt_sets import PromptCase, load_prompts, prompts_hash


def test_cases_are_typed_with_their_other_fields_kept(tmp_path):
    path = tmp_path / "p.jsonl"
    rows = [
        {"id": 7, "prompt": "def f():", "task": "complete", "lang": "python"},
        {"prompt": "x = 1"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    cases = load_prompts(path)
    assert cases == [
        PromptCase("7", "def f():", "complete", {"lang": "python"}),
        PromptCase("line-2", "x = 1", "all", {}),
    ]
    assert cases[0].to_dict() == {
        "id": "7",
        "prompt": "def f():",
        "task": "complete",
        "lang": "python",
    }
    expected = hashlib.sha256()
    for case_id, text in (("7", "def f():"), ("line-2", "x = 1")):
        expected.update(json.dumps([case_id, text]).encode())
    assert prompts_hash(cases) == expected.hexdigest()


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"prompt": ""}', '"prompt" must be a string with text in it'),
        ('{"prompt": "a", "id": true}', '"id" must be a non-empty string or a number'),
        ('{"prompt": "a", "task": 3}', '"task" must be a non-empty string'),
        ("[1]", "each line must be an object"),
    ],
)
def test_a_bad_line_names_the_file_and_line(tmp_path, line, says):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "ok"}\n' + line + "\n")
    with pytest.raises(InputError) as info:
        load_prompts(path)
    assert says in str(info.value) and info.value.where == f"{path}:2"
