"""Entity-aligned splitting for each grammar, prose protection, and the fallback splitter."""

import re

import pytest

from copilot_cli.chunking.files import chunk_file
from copilot_cli.chunking.prose import sentence_cuts

SNIPPETS = {
    "a.js": (
        "function alpha(x) {\n  return x + 1;\n}\n\nclass Beta {\n  gamma() {\n"
        "    return 2;\n  }\n}\n",
        {"alpha", "Beta", "gamma"},
    ),
    "a.ts": (
        "export interface Shape {\n  area(): number;\n}\n\nexport class Square implements "
        "Shape {\n  constructor(private side: number) {}\n  area(): number {\n"
        "    return this.side * this.side;\n  }\n}\n",
        {"Shape", "Square", "area"},
    ),
    "a.go": (
        "package main\n\ntype Point struct {\n\tX int\n}\n\nfunc (p Point) Norm() int {\n"
        "\treturn p.X\n}\n\nfunc main() {}\n",
        {"Point", "Norm", "main"},
    ),
    "a.rs": (
        "struct Point { x: i32 }\n\nimpl Point {\n    fn norm(&self) -> i32 { self.x }\n}\n"
        "\nfn main() {}\n",
        {"Point", "norm", "main"},
    ),
    "A.java": (
        "class A {\n  int f() { return 1; }\n  A() {}\n}\n\ninterface B { void g(); }\n",
        {"A", "f", "B"},
    ),
    "a.c": (
        "struct point { int x; };\n\nint norm(struct point p) {\n  return p.x;\n}\n",
        {"point", "norm"},
    ),
    "a.cpp": (
        "namespace geo {\nclass Point {\n public:\n  int norm() { return 1; }\n};\n}\n",
        {"geo", "Point", "norm"},
    ),
}


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_every_grammar_finds_its_entities(name, counter):
    source, expected = SNIPPETS[name]
    report = chunk_file(source.encode(), name, counter, 384)
    assert report.mode == "code" and not report.parse_error
    found = {e["name"] for chunk in report.chunks for e in chunk.entities}
    assert expected <= found, found


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_small_budget_splits_only_at_line_boundaries(name, counter):
    source, _ = SNIPPETS[name]
    data = source.encode()
    report = chunk_file(data, name, counter, 12)
    assert b"".join(data[c.start_byte : c.end_byte] for c in report.chunks) == data
    for chunk in report.chunks:
        assert chunk.token_count <= 12
        if not chunk.mid_line:
            assert chunk.start_byte == 0 or data[chunk.start_byte - 1 : chunk.start_byte] == b"\n"


def test_a_line_longer_than_the_budget_is_split_mid_line_and_kept(counter):
    data = ("x = [" + ", ".join(str(i) for i in range(400)) + "]\n").encode()
    report = chunk_file(data, "long.py", counter, 64)
    assert len(report.chunks) > 3 and all(c.token_count <= 64 for c in report.chunks)
    assert b"".join(data[c.start_byte : c.end_byte] for c in report.chunks) == data
    assert all(c.mid_line for c in report.chunks)


def test_a_file_that_does_not_parse_falls_back(counter):
    data = b"def broken(:\n    pass\n\n\nclass Fine:\n    pass\n"
    report = chunk_file(data, "broken.py", counter, 384)
    assert report.parse_error and report.mode == "fallback"
    assert b"".join(data[c.start_byte : c.end_byte] for c in report.chunks) == data


def test_fallback_splits_at_blank_lines_within_budget(counter):
    blocks = [f"[section{i}]\nkey{i} = value{i}\nother{i} = {i}\n" for i in range(30)]
    data = "\n".join(blocks).encode()
    report = chunk_file(data, "settings.toml", counter, 40)
    assert report.mode == "fallback" and len(report.chunks) > 3
    for chunk in report.chunks:
        assert chunk.token_count <= 40
        assert chunk.text.startswith("[section")  # cuts fall at block starts


PROSE = (
    "# Guide\n\nIntro text about the service.\n\n## Setup in San Francisco\n\n"
    "Dr. Ada Lovelace wrote the `configure_cache(max_bytes=1024)` helper. See "
    "[the notes](https://example.com/notes?section=a.b#c) for details. The TTLCache class is "
    "used by the New York team. It expires entries lazily. Contact ops@example.com for access. "
    "Run it with care. The end is near. Another sentence follows here.\n\n"
    "```python\ndef fenced():\n    return 'never split me'\n```\n\n"
    "Final words about https://example.com/a-long/url/path.html and snake_case_names here.\n"
)
PROTECTED = [
    "`configure_cache(max_bytes=1024)`",
    "[the notes](https://example.com/notes?section=a.b#c)",
    "San Francisco",
    "Ada Lovelace",
    "New York",
    "ops@example.com",
    "```python\ndef fenced():\n    return 'never split me'\n```",
    "https://example.com/a-long/url/path.html",
    "TTLCache",
    "snake_case_names",
]


@pytest.mark.parametrize("budget", [24, 32, 48, 400])
def test_prose_never_splits_inside_protected_spans(counter, budget):
    data = PROSE.encode()
    report = chunk_file(data, "guide.md", counter, budget)
    assert report.mode == "prose"
    assert b"".join(data[c.start_byte : c.end_byte] for c in report.chunks) == data
    cuts = {c.start_byte for c in report.chunks[1:]}
    for span in PROTECTED:
        start = data.index(span.encode())
        end = start + len(span.encode())
        if len(counter.tokenizer(span).input_ids) + 10 <= budget:
            assert not any(start < cut < end for cut in cuts), f"cut inside {span!r}"
    assert all(c.token_count <= budget for c in report.chunks)


def test_sentence_cuts_skip_abbreviations_and_initials():
    text = "Dr. Smith met J. R. Tolkien in St. Louis. They talked e.g. about maps. Done."
    cuts = sentence_cuts(text)
    starts = [text[c : c + 4] for c in cuts]
    assert starts == ["They", "Done"]
    assert not re.search(r"Dr\.\s$", text[: cuts[0]])
