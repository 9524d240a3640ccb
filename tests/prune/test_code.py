"""prune's code mode on real files of every language the sample repository has (real
tree-sitter grammars, the shipped model)."""

import itertools
import json
import re
from pathlib import Path

import pytest

from copilot_cli.cli import app
from copilot_cli.core.models import ModelSpec, load_model
from copilot_cli.core.syntax import parser_for, parses
from copilot_cli.prune import PruneOptions, prune_text
from copilot_cli.prune.code import code_units, completion_for, detect, frame
from copilot_cli.prune.pruner import word_units

REPO = Path(__file__).resolve().parents[2]
SAMPLES = {
    "python": REPO / "sample_data" / "repo" / "src" / "kvstore" / "lru.py",
    "go": REPO / "sample_data" / "repo" / "worker" / "wal.go",
    "rust": REPO / "sample_data" / "repo" / "hashring" / "src" / "lib.rs",
    "typescript": REPO / "sample_data" / "repo" / "client" / "src" / "client.ts",
}


@pytest.fixture(scope="module")
def shipped():
    return load_model(ModelSpec())


def _errors(text: str, language: str) -> int:
    stack, count = [parser_for(language).parse(text.encode()).root_node], 0
    while stack:
        node = stack.pop()
        count += node.type == "ERROR" or node.is_missing
        stack.extend(node.children)
    return count


def _cut(text: str, share: float) -> str:
    """A context cut out of a file in the middle of a line, as an editor sends it."""
    return text[: int(len(text) * share)]


@pytest.mark.parametrize("language", sorted(SAMPLES))
def test_detects_language_of_whole_and_cut_files(language):
    text = SAMPLES[language].read_text()
    assert detect(text).language == language
    assert detect(_cut(text, 0.6)).language == language


def test_prose_is_not_code():
    for name in ("architecture.md", "operations.md"):
        assert detect((REPO / "sample_data" / "repo" / "docs" / name).read_text()) is None


@pytest.mark.parametrize("language", sorted(SAMPLES))
def test_frame_of_a_cut_file_parses_and_ends_at_a_line_start(language):
    text = _cut(SAMPLES[language].read_text(), 0.6)
    found = frame(text, language)
    assert found is not None and found.cut >= len(text) // 2
    assert found.cut == len(text) or text[found.cut - 1] == "\n"
    assert parses(text[: found.cut] + found.completion, language)
    assert not parses(text, language) or found.cut == len(text)


def test_completion_closes_brackets_outside_strings_and_comments():
    go = 'func f() {\n\tx := "{{("\n\t// a comment with {\n\tif y {\n\t\tg(`raw {`,\n'
    assert completion_for(go, "go") == "\n)\n}\n}\n"
    assert parses(go + completion_for(go, "go"), "go")
    python = "class A:\n    def f(self):\n"
    assert parses(python + completion_for(python, "python"), "python")
    rust = "impl<'a> A<'a> {\n    fn f(&self) -> char {\n        let c = '{';\n"
    assert completion_for(rust, "rust") == "\n}\n}\n"


def test_comment_spans_never_take_the_line_break():
    text = "/// Doc comment.\n#[derive(Debug)]\npub struct A {\n    x: u32, // note\n}\n"
    units = code_units(text, frame(text, "rust"))
    assert units.removable and all("\n" not in text[a:b] for a, b in units.removable)
    for a, b in units.statements:  # whole lines
        assert (a == 0 or text[a - 1] == "\n") and text[b - 1] == "\n"


@pytest.mark.parametrize("method", ["hybrid", "spread"])
@pytest.mark.parametrize("rate", [0.5, 0.33])
@pytest.mark.parametrize("language", sorted(SAMPLES))
def test_code_output_has_no_new_syntax_error(shipped, language, rate, method):
    for text in (SAMPLES[language].read_text(), _cut(SAMPLES[language].read_text(), 0.6)):
        result = prune_text(PruneOptions(text=text, rate=rate, method=method), shipped)
        assert result.language == language and result.mode.startswith("code")
        assert result.parses is True
        assert abs(result.achieved_rate - rate) <= 0.05 * rate
        assert _errors(result.text, language) <= _errors(text, language)
        if result.verbatim_tail:  # the unfinished line(s) survive as they are
            assert result.text.endswith(text[-result.verbatim_tail :])
        found = frame(text, language)
        head = result.text[: len(result.text) - (len(text) - found.cut)]
        assert parses(head + found.completion, language)


@pytest.mark.slow
@pytest.mark.parametrize("language", sorted(SAMPLES))
def test_search_mixes_stay_valid_code(shipped, language):
    # a mix joins parts of different patterns, each checked only with its own removals
    text = _cut(SAMPLES[language].read_text(), 0.6)
    result = prune_text(PruneOptions(text=text, rate=0.33, method="search"), shipped)
    assert result.language == language and result.parses is True
    assert abs(result.achieved_rate - 0.33) <= 0.05 * 0.33
    assert _errors(result.text, language) <= _errors(text, language)
    assert result.text.endswith(text[len(text) - result.verbatim_tail :])


def test_whole_python_file_still_compiles(shipped):
    text = SAMPLES["python"].read_text()
    result = prune_text(PruneOptions(text=text, rate=0.33), shipped)
    assert result.mode == "code-lines" and result.verbatim_tail == 0
    compile(result.text, "pruned.py", "exec")  # the interpreter's parser, not only tree-sitter


def test_protect_survives_line_removal(shipped):
    text = SAMPLES["go"].read_text()
    pattern = r"ErrCorrupt|0o644"
    result = prune_text(PruneOptions(text=text, rate=0.3, protect=(pattern,)), shipped)
    assert result.mode == "code-lines"
    assert len(re.findall(pattern, result.text)) == len(re.findall(pattern, text))


def test_named_language_that_does_not_parse_falls_back_to_prose(shipped):
    text = (REPO / "sample_data" / "repo" / "docs" / "architecture.md").read_text()
    result = prune_text(PruneOptions(text=text, rate=0.5, language="go"), shipped)
    assert result.mode == "prose" and result.parses is None and result.language is None


def test_marks_inside_words_are_not_removed_alone():
    text = "see count-entry and a.b then stop."
    offsets = [(m.start(), m.end()) for m in re.finditer(r"\w+|[^\w\s]| ", text)]
    pieces = [
        "".join(text[slice(*offsets[i])] for i in range(a, b)) for a, b in word_units(text, offsets)
    ]
    assert " count-entry" in pieces and " a.b" in pieces and pieces[-1] == "."


def test_cli_takes_language_from_extension(runner, tmp_path):
    source = tmp_path / "wal.go"
    source.write_text(_cut(SAMPLES["go"].read_text(), 0.7))
    result = runner.invoke(app, ["prune", str(source), "--rate", "0.5", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["language"] == "go" and payload["parses"] is True
    result = runner.invoke(app, ["prune", str(source), "--rate", "0.5", "--language", "cobol"])
    assert result.exit_code == 2 and "--language" in result.stderr


def test_removed_intervals_merge_and_apply():
    from copilot_cli.prune.removal import Removed

    removed = Removed()
    text = "0123456789abcdef"
    for span in [(2, 4), (8, 10), (3, 6), (12, 13)]:
        removed.add(*span)
    assert list(zip(removed.starts, removed.ends, strict=True)) == [(2, 6), (8, 10), (12, 13)]
    assert removed.apply(text, 0, len(text)) == "0167abdef"
    assert removed.apply(text, 5, 12) == "67ab"
    assert removed.apply(text, 0, len(text), (6, 8)) == "01abdef"


def test_large_definitions_are_split_into_members():
    text = SAMPLES["python"].read_text()
    units = code_units(text, frame(text, "python"))
    top = units.segments.children
    assert top[0].start == 0 and top[-1].end == len(text)
    assert all(a.end == b.start for a, b in itertools.pairwise(top))
    split = [s for s in top if s.children]
    assert split, "the LRU class is larger than one segment"
    for segment in split:
        assert segment.children[0].before and segment.children[0].start > segment.start
        for statement in units.statements:
            chain = units.segments.innermost(*statement)
            assert chain[-1].start <= statement[0] and statement[1] <= chain[-1].end


@pytest.mark.slow
def test_parse_checks_stay_local_on_a_long_file(shipped, monkeypatch):
    """Each statement removal is checked on the definition it lies in, not the whole file, so
    the work grows linearly with the input."""
    import copilot_cli.prune.pruner as pruner

    text = "\n\n".join(
        p.read_text(errors="replace")
        for p in sorted((REPO / "sample_data" / "repo" / "src").rglob("*.py"))
    )
    sizes = []
    real = pruner.parses
    monkeypatch.setattr(pruner, "parses", lambda s, lang: sizes.append(len(s)) or real(s, lang))
    result = prune_text(PruneOptions(text=text, rate=0.5, language="python"), shipped)
    assert result.parses and result.mode == "code-lines"
    assert len(sizes) > 50
    assert max(sizes) < len(text) / 4


def test_cli_says_when_protected_spans_keep_more_than_asked(runner, tmp_path):
    source = tmp_path / "notes.md"
    source.write_text((REPO / "sample_data" / "repo" / "docs" / "architecture.md").read_text())
    result = runner.invoke(app, ["prune", str(source), "--rate", "0.1", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["achieved_rate"] > 0.105 and "protected spans" in result.stderr
    result = runner.invoke(app, ["prune", str(source), "--rate", "0.5", "--json"])
    assert "protected spans" not in result.stderr


ESCAPES = {
    "python": 'EOL = "\\r\\n"\nTAB = "\\t"\nQ = "say \\"hi\\" twice"\nP = "C:\\\\temp\\\\x"\n',
    "go": 'var eol = "\\r\\n"\nvar q = "say \\"hi\\" twice"\nvar p = "C:\\\\temp\\\\x"\n',
    "typescript": 'const eol = "\\r\\n";\nconst q = "say \\"hi\\" twice";\nconst p = "C:\\\\t";\n',
}


@pytest.mark.parametrize("language", sorted(ESCAPES))
def test_string_contents_never_lose_half_an_escape(shipped, language):
    """Words inside strings may go, but an escape sequence goes whole or stays: `'\\r\\n'`
    losing `r\\n` would keep `'\\'`, a string that no longer closes."""
    body = "".join(ESCAPES[language] for _ in range(12))
    text = {"python": "", "go": "package main\n\n", "typescript": ""}[language] + body
    for rate in (0.5, 0.3, 0.15):
        result = prune_text(PruneOptions(text=text, rate=rate, language=language), shipped)
        assert result.parses is True, (rate, result.text)
        assert _errors(result.text, language) == 0
        if language == "python":
            compile(result.text, "pruned.py", "exec")


def test_spread_removes_list_elements_inside_lines_and_keeps_parsing(shipped):
    text = "".join(
        f"def handler_{n}(request, session, config_{n}, timeout=30):\n"
        f"    values = [alpha_{n}, beta_{n}, gamma_{n}, delta_{n}]\n"
        f"    return dispatch(request, values, session.user_{n}, config_{n}.mode)\n\n"
        for n in range(12)
    )
    for method in ("spread", "hybrid"):
        result = prune_text(PruneOptions(text=text, rate=0.6, method=method), shipped)
        assert result.parses is True
        compile(result.text, "pruned.py", "exec")
        lines = [line for line in result.text.splitlines() if "dispatch(" in line or "= [" in line]
        thinned = [line for line in lines if line.count(",") < 3]
        # spread takes single elements (with their comma) out of kept lines; hybrid only
        # removes whole statements and words in comments and strings
        assert bool(thinned) == (method == "spread"), (method, thinned[:3])


def test_a_statement_with_a_comment_after_it_goes_with_its_comment(shipped):
    text = "".join(f"CODE_{i} = bytes([{i}])  # option {i} of the protocol\n" for i in range(80))
    units = code_units(text, frame(text, "python"))
    assert len(units.statements) == 80  # each line, comment included
    assert all(text[a:b].endswith("protocol\n") for a, b in units.statements)
    block = "int a = 1; /* spans\n   lines */\nint b = 2; // ends here\n"
    owned = {block[a:b] for a, b in code_units(block, frame(block, "c")).statements}
    assert "int b = 2; // ends here\n" in owned
    assert not any(line.startswith("int a") for line in owned)  # its comment runs on
    # numbers are never removed: when only the comment words could go, 0.76 was kept
    result = prune_text(PruneOptions(text=text, rate=0.2, method="spread"), shipped)
    assert abs(result.achieved_rate - 0.2) <= 0.05 * 0.2
    compile(result.text, "pruned.py", "exec")
