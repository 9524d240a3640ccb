"""Choosing context: the budget is never exceeded (recounted), the output is deterministic,
definitions are found across files in each chunked language, imports are followed, the file
itself is never repeated, a stale or damaged index is rebuilt."""

from __future__ import annotations

import itertools
import json
import shutil
from types import SimpleNamespace

import pytest

from copilot_cli.context import ContextOptions, open_session, select_context

from .conftest import SAMPLE


def _count(session, text: str) -> int:
    return len(session.tokenizer(text, add_special_tokens=False).input_ids)


def _at(session, file: str, line: int, budget: int = 1024, **kw):
    text = (SAMPLE / file).read_text()
    options = ContextOptions(file=file, text=text, cursor=(line, None), budget=budget, **kw)
    return session.select(options)


def _line_of(file: str, needle: str) -> int:
    lines = (SAMPLE / file).read_text().split("\n")
    return next(k for k, line in enumerate(lines, 1) if needle in line) + 1


SOURCES = [
    "src/kvstore/server.py",
    "src/kvstore/lru.py",
    "client/src/client.ts",
    "worker/main.go",
    "worker/compactor.go",
    "hashring/src/lib.rs",
    "tests/test_lru.py",
]


@pytest.mark.parametrize("budget", [40, 128, 512, 2048])
def test_the_budget_is_never_exceeded_by_a_recount(session, budget):
    checked = 0
    for file in SOURCES:
        lines = (SAMPLE / file).read_text().count("\n") + 1
        for line in range(1, lines + 1, 9):
            result = _at(session, file, line, budget)
            assert result.tokens == _count(session, result.text) <= budget, (file, line)
            assert all(file != s.path for s in result.snippets)
            checked += 1
    assert checked > 50


def test_deterministic_and_the_same_from_a_cached_index(chunked, session):
    first = _at(session, "src/kvstore/server.py", 60).to_dict()
    again = open_session(chunked["chunks"], chunked["registry"])  # index read from the cache
    assert json.dumps(first, sort_keys=True) == json.dumps(
        _at(again, "src/kvstore/server.py", 60).to_dict(), sort_keys=True
    )
    assert first["snippets"] and first["tokens"] <= 1024


@pytest.mark.parametrize(
    ("file", "needle", "defined_in", "name"),
    [
        ("src/kvstore/server.py", "FrameReader()", "src/kvstore/protocol.py", "FrameReader"),
        ("client/src/client.ts", "withRetry(", "client/src/retry.ts", "withRetry"),
        ("worker/main.go", "compactor.Run()", "worker/compactor.go", "Compactor"),
    ],
)
def test_definitions_are_found_across_files(session, file, needle, defined_in, name):
    result = _at(session, file, _line_of(file, needle), budget=1024)
    hits = [s for s in result.snippets if s.path == defined_in and s.signals["definition"] > 0]
    assert hits, [(s.path, s.reason) for s in result.snippets]
    assert any(name in s.text for s in hits)
    assert any("defines" in s.reason for s in hits)


def test_python_and_typescript_imports_are_followed(session):
    result = _at(session, "src/kvstore/server.py", 20, budget=2048)
    imported = {s.path for s in result.snippets if s.signals["import"] > 0}
    assert {"src/kvstore/config.py", "src/kvstore/protocol.py"} <= imported
    result = _at(session, "client/src/client.ts", 6, budget=2048)
    imported = {s.path for s in result.snippets if s.signals["import"] > 0}
    assert {"client/src/codec.ts", "client/src/retry.ts"} & imported


def test_prefix_and_suffix_like_an_editor_sends_them(session):
    text = (SAMPLE / "src/kvstore/server.py").read_text()
    cut = text.index("FrameReader()")
    by_cursor = session.select(
        ContextOptions(file="src/kvstore/server.py", prefix=text[:cut], suffix=text[cut:])
    )
    assert any(s.path == "src/kvstore/protocol.py" for s in by_cursor.snippets)


def test_another_language_ranks_below_the_files_own(session):
    """`Frame` is defined in Python and in TypeScript: a Python file gets the Python one."""
    result = _at(session, "src/kvstore/server.py", 60, budget=400)
    assert result.snippets and result.snippets[-1].path.endswith(".py")


def test_a_rechunked_repository_gets_a_new_index(tmp_path):
    from copilot_cli.chunking import ChunkOptions, chunk_repository

    repo = shutil.copytree(SAMPLE, tmp_path / "repo")
    out = {"out": tmp_path / "c.jsonl", "registry": tmp_path / "r.json"}
    chunk_repository(ChunkOptions(repos=(repo,), jobs=1, **out))
    options = dict(chunks=out["out"], registry=out["registry"], file="worker/main.go")
    before = select_context(ContextOptions(**options, prefix="x := ShardPlanner(", budget=256))
    assert not any("ShardPlanner" in s.text for s in before.snippets)
    (repo / "worker" / "planner.go").write_text(
        "package main\n\n// ShardPlanner spreads keys over shards.\n"
        "func ShardPlanner(shards int) []int {\n\treturn make([]int, shards)\n}\n"
    )
    chunk_repository(ChunkOptions(repos=(repo,), jobs=1, **out))
    after = select_context(ContextOptions(**options, prefix="x := ShardPlanner(", budget=256))
    assert after.snippets[-1].path == "worker/planner.go"
    assert "ShardPlanner" in after.snippets[-1].reason


def test_a_damaged_index_cache_entry_is_rebuilt(chunked, session):
    from copilot_cli.context.index import index_key
    from copilot_cli.core.fingerprints import cache_dir

    key = index_key(session.header, session.registry)
    path = cache_dir() / "context" / f"{key}.json"
    assert path.is_file()
    path.write_bytes(path.read_bytes()[:-10] + b"0000000000")
    again = open_session(chunked["chunks"], chunked["registry"])
    assert again.index.ids == session.index.ids and again.index.defs == session.index.defs
    digest, _, body = path.read_bytes().partition(b"\n")
    import hashlib

    assert digest.decode() == hashlib.sha256(body).hexdigest()  # written again, intact


def test_the_windows_are_cached_and_a_damaged_or_foreign_entry_is_rebuilt(chunked, session):
    """The window index is cached beside the context index; a session reading it back chooses
    byte for byte what a session that built it chose; a flipped byte or a resealed entry of
    the wrong shape is rebuilt, never trusted."""
    import hashlib
    import io

    import numpy as np

    from copilot_cli.context.windows import windows_of

    first = _at(session, "src/kvstore/server.py", 60).to_dict()
    windows_of(session.index)
    (path,) = (cache_dir_context() / "").glob(f"{session.index.key}.windows-*.npz")

    def again() -> dict:
        fresh = open_session(chunked["chunks"], chunked["registry"])
        return _at(fresh, "src/kvstore/server.py", 60).to_dict()

    assert again() == first  # read back from the cache
    raw = path.read_bytes()
    path.write_bytes(raw[:-10] + b"0000000000")
    assert again() == first and path.read_bytes() == raw  # damaged: rebuilt, the same
    body = raw.partition(b"\n")[2]
    with np.load(io.BytesIO(body)) as loaded:
        data = {k: loaded[k] for k in loaded.files}
    data["end"] = data["end"] + 10_000  # windows past their files' ends, resealed
    buffer = io.BytesIO()
    np.savez(buffer, **data)
    forged = buffer.getvalue()
    path.write_bytes(hashlib.sha256(forged).hexdigest().encode() + b"\n" + forged)
    assert again() == first and path.read_bytes() == raw


def cache_dir_context():
    from copilot_cli.core.fingerprints import cache_dir

    return cache_dir() / "context"


def test_the_overview_fits_its_budget_and_names_central_definitions(session):
    from copilot_cli.context import OverviewOptions

    result = session.overview(OverviewOptions(budget=150))
    assert result.tokens == _count(session, result.text) <= 150
    assert result.entries and "Opcode" in result.text
    assert session.overview(OverviewOptions(budget=150)).text == result.text


def test_windows_of_code_like_the_cursors_then_definition_lines(session):
    result = _at(session, "src/kvstore/server.py", 60, budget=1024)
    kinds = [s.kind for s in result.snippets]
    assert "window" in kinds and "signatures" in kinds
    # definition lines first, windows after them (the most similar nearest the code)
    assert kinds == sorted(kinds, key=lambda k: k == "window")
    windows = [s for s in result.snippets if s.kind == "window"]
    assert [s.score for s in windows] == sorted(s.score for s in windows)
    for snippet in windows:
        assert snippet.path != "src/kvstore/server.py" and snippet.chunks
        # a window is the file's own lines, start to end
        lines = (SAMPLE / snippet.path).read_text().split("\n")
        assert snippet.text == "\n".join(lines[snippet.start_line - 1 : snippet.end_line])
        assert snippet.signals["similarity"] > 0 and "reads like" in snippet.reason
    spans = sorted((s.path, s.start_line, s.end_line) for s in windows)
    for (p1, _, e1), (p2, s2, _) in itertools.pairwise(spans):
        assert p1 != p2 or s2 > e1  # windows that meet are merged, never repeated
    for snippet in result.snippets:
        if snippet.kind == "signatures":
            assert snippet.chunks and snippet.path != "src/kvstore/server.py"
            lines = snippet.text.split("\n")
            assert all(line.strip() for line in lines) and len(lines) == len(set(lines))
            # each line is a definition's first line, found in the file it names
            source = (SAMPLE / snippet.path).read_text()
            assert all(line.split("(")[0].strip() in source for line in lines)
            shown = "\n".join(w.text for w in windows if w.path == snippet.path)
            assert not any(line in shown for line in lines)  # not what a window shows


def test_the_most_similar_code_elsewhere_is_found(session):
    """A cursor in code that another file repeats almost line for line: that file's lines,
    and the line that follows them there, come last (nearest the cursor)."""
    lines = (SAMPLE / "src/kvstore/lru.py").read_text().split("\n")
    start = next(k for k, line in enumerate(lines) if "def " in line and k > 5)
    prefix = "\n".join(lines[start : start + 8]) + "\n"
    result = session.select(ContextOptions(file="other/copy.py", prefix=prefix, budget=512))
    last = result.snippets[-1]  # lru.py or its legacy copy, which repeats it
    assert last.kind == "window" and last.path.endswith(("lru.py", "lru_old.py"))
    assert lines[start + 3] in last.text
    following = next(line for line in lines[start + 8 :] if line.strip())
    assert following in last.text  # what comes next there is shown


def test_the_split_follows_what_the_cursor_needs(session):
    """A cursor on a use of a name defined in another file gets more definition lines than a
    cursor in code another file repeats (that file's lines are what it needs)."""
    from copilot_cli.context import select

    def split_and_signatures(file: str, prefix: str) -> tuple[float, int]:
        request = select.Request(file, prefix, "", "python")
        share = select.split(
            select.signals(session.index, request), select.ranked_windows(session.index, request)
        )
        options = ContextOptions(file=file, prefix=prefix, budget=600)
        snippets = session.select(options).snippets
        return share, sum(s.tokens for s in snippets if s.kind == "signatures")

    body = "    total = 0\n    for key in keys:\n        total += len(key)\n"
    calling = split_and_signatures("src/new.py", f"def scan(k):\n{body}    reader = FrameReader(")
    lines = (SAMPLE / "src/kvstore/lru.py").read_text().split("\n")
    start = next(k for k, line in enumerate(lines) if "def " in line and k > 5)
    repeated = split_and_signatures("other/copy.py", "\n".join(lines[start : start + 8]) + "\n")
    assert calling[0] == select.SIGNATURES_CALLING > repeated[0] == select.SIGNATURES_SIMILAR
    assert calling[1] > repeated[1]


def test_javascript_assigned_functions_are_definitions():
    from copilot_cli.context.index import _defined_names
    from copilot_cli.context.signatures import signature_line

    text = (
        "res.send = function send(body) {\n  return body\n}\n"
        "exports.parse = async function (s) {}\n"
        "const merge = (a, b) => ({ ...a, ...b })\n"
        "App.prototype.listen = function listen() {}\n"
        "const limit = 10\n"
    )
    names = _defined_names(SimpleNamespace(language="javascript", text=text, entities=()))
    assert names == ["send", "parse", "merge", "listen"]
    assert _defined_names(SimpleNamespace(language="python", text=text, entities=())) == []
    line = signature_line(text, "parse")
    assert line is not None and line.startswith("exports.parse = async function (s)")
    assert "merge" not in line  # a one-line definition does not run into the next


def test_chunks_as_the_unit_gives_whole_chunks_stored_kv_can_serve(session):
    """`unit="chunks"`: every similar-code snippet is one whole chunk, its text the chunk's own
    (what `prefill-kv --chunks` stored), chosen from the same windows as the lines."""
    lines = _at(session, "src/kvstore/server.py", 60, budget=1024)
    chunks = _at(session, "src/kvstore/server.py", 60, budget=1024, unit="chunks")
    assert chunks.tokens == _count(session, chunks.text) <= 1024
    whole = [s for s in chunks.snippets if s.kind != "signatures"]
    assert whole and all(s.kind == "chunk" for s in whole)
    texts = dict(zip(session.index.ids, session.index.texts, strict=True))
    assert all(s.chunks == [s.id] and s.text == texts[s.id] for s in whole)
    assert len({s.id for s in whole}) == len(whole)
    # the most similar window's chunks come first in the chunks' ranking too
    best = next(s for s in reversed(lines.snippets) if s.kind == "window")
    assert whole[-1].id in best.chunks


def test_an_unknown_unit_is_refused():
    from copilot_cli.core.options import OptionError

    with pytest.raises(OptionError, match="unit"):
        ContextOptions(file="a.py", prefix="", unit="words")


def test_a_block_over_its_budget_on_recount_sheds_definition_lines_then_windows(session):
    """The exact recount's path: a packed block whose rendered text is over the budget drops
    its last definition line first, then its weakest window, until it fits."""
    from copilot_cli.context import select
    from copilot_cli.context.windows import windows_of

    request = select.Request("src/new.py", "reader = FrameReader(\n", "", "python")
    ranked = select.ranked_windows(session.index, request)[:3]
    windows = windows_of(session.index)
    packer = select.Packer(session.index, session.tokenizer, 10_000, "xml", "")
    packed = select.Packed(windows=windows, regions=list(ranked))
    packed.signatures = {"src/kvstore/lru.py": ["class LRU:", "    def get(self, key):"]}
    packed.sources = {"src/kvstore/lru.py": [0, 0]}
    whole = packer.exact(packed).tokens
    assert len(packed.regions) == 3 and whole > 0
    one_window = select.Packed(windows=windows, regions=list(ranked[:1]))
    packer.budget = packer.exact(one_window).tokens  # room for the best window alone
    result = packer.exact(packed)
    assert result.tokens == _count(session, result.text) <= packer.budget < whole
    assert not result.signatures and result.regions == ranked[:1]


def test_signature_lines_follow_the_limit_asked_for(session):
    """The per-chunk memo of signature lines is kept per limit: a smaller limit asked first
    does not cut what a larger one gets."""
    index = session.index
    i = max(range(len(index.ids)), key=lambda k: len(index.names_of(k)))
    assert len(index.names_of(i)) >= 3
    few = index.signatures_of(i, 1)
    more = index.signatures_of(i, 6)
    assert len(few) == 1 and len(more) > 1 and more[0] == few[0]


def test_a_copy_of_another_files_code_is_shown_once(session):
    """src/kvstore/legacy/lru_old.py is a near-copy of src/kvstore/lru.py: code like theirs
    gets one of them, not the same lines twice (windows) nor the same definition lines twice
    (a chunk whose lines are listed or shown already)."""
    lines = (SAMPLE / "src/kvstore/lru.py").read_text().split("\n")
    checked = 0
    for start in range(0, 120, 10):
        prefix = "\n".join(lines[start : start + 20]) + "\n"
        result = session.select(
            ContextOptions(file="src/other/cache2.py", prefix=prefix, budget=1024)
        )
        shown = [(s.path, {x.strip() for x in s.text.split("\n")} - {""}) for s in result.snippets]
        for (path_a, a), (path_b, b) in itertools.combinations(shown, 2):
            if path_a != path_b and a and b:
                assert len(a & b) < 0.8 * min(len(a), len(b)), (start, path_a, path_b)
        checked += len(shown)
    assert checked >= 24


def _session_of(tmp_path, files: dict[str, str]):
    """A session over a repository of these files (name -> text), chunked here."""
    from copilot_cli.chunking import ChunkOptions, chunk_repository

    repo = tmp_path / "repo"
    repo.mkdir()
    for name, text in files.items():
        (repo / name).write_text(text)
    out = {"out": tmp_path / "c.jsonl", "registry": tmp_path / "r.json"}
    chunk_repository(ChunkOptions(repos=(repo,), jobs=1, **out))
    return open_session(out["out"], out["registry"])


def test_files_that_share_only_a_licence_header_are_not_copies(tmp_path):
    """The first windows of files that open with the same licence header differ in what
    follows it: each stays a candidate (the lines after the header are what the code at the
    cursor may need)."""
    from copilot_cli.context import select

    header = "".join(
        f"// Licensed under the Example License, clause {k} of 14.\n" for k in range(14)
    )
    files = {}
    for name, body in (("alpha", "Alpha"), ("beta", "Beta"), ("gamma", "Gamma")):
        code = "\n".join(
            f"func {body}Step{k}(c *Command) error {{ return c.Run{body}({k}) }}" for k in range(8)
        )
        files[f"{name}.go"] = f"{header}\npackage demo\n\n{code}\n"
    session = _session_of(tmp_path, files)
    prefix = f"{header}\npackage demo\n\nfunc New(c *Command) error {{\n"
    ranked = select.ranked_windows(session.index, select.Request("new.go", prefix, "", "go"))
    windows = select.windows_of(session.index)
    first = {windows.paths[r.file] for r in ranked if r.start == 0}
    assert first == {"alpha.go", "beta.go", "gamma.go"}


def test_the_line_just_written_weighs_most_in_a_windows_rank(tmp_path):
    """Code like the line before the cursor outranks code like lines further up that shares
    more names with them: the next line is most like the one just written."""
    from copilot_cli.context import select

    session = _session_of(
        tmp_path,
        {
            "far.py": "def far():\n    return alphonse + bertrand + cyprien\n",
            "near.py": "def near():\n    return dorothea + eleanor\n",
        },
    )
    prefix = "total = alphonse + bertrand + cyprien\n" + "\n" * 8 + "last = dorothea + eleanor\n"
    request = select.Request("cur.py", prefix, "", "python")
    ranked = select.ranked_windows(session.index, request)
    windows = select.windows_of(session.index)
    assert [windows.paths[r.file] for r in ranked] == ["near.py", "far.py"]
