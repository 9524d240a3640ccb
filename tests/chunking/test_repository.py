"""chunk on the sample repository: lossless, within budget, entity-aligned, deduplicated."""

import json

import pytest

from copilot_cli.chunking.languages import all_entities, parser_for
from copilot_cli.chunking.packer import SEPARATOR
from tests.chunking.conftest import SAMPLE, reassemble, run


@pytest.fixture(scope="module", params=[384, 96])
def sample(request, tmp_path_factory, tokenizer):
    out = tmp_path_factory.mktemp("chunks") / "chunks.jsonl"
    return request.param, *run(
        SAMPLE, out, tokenizer, max_tokens=request.param, registry=out.with_suffix(".registry.json")
    )


def test_files_are_covered_byte_for_byte(sample):
    _, _result, _, chunks = sample
    files = reassemble(chunks)
    non_empty = [p for p in SAMPLE.rglob("*") if p.is_file() and p.stat().st_size]
    assert len(files) == len(non_empty) >= 30  # an empty file has no bytes to cover
    for path, parts in files.items():
        data = (SAMPLE / path).read_bytes()
        position = 0
        for start, end, text in parts:
            assert start == position, f"{path}: gap or overlap at byte {position}"
            assert text == data[start:end].decode("utf-8", errors="replace")
            position = end
        assert position == len(data), path


def test_no_chunk_exceeds_the_budget_by_a_recount(sample, recount):
    budget, _, header, chunks = sample
    assert header["max_tokens"] == budget and header["format"] == "copilot-opt.chunks"
    for chunk in chunks:
        assert chunk["token_count"] == recount(chunk["header"] + chunk["text"])
        if chunk["header"]:
            assert SEPARATOR in chunk["scope"]
        assert chunk["token_count"] <= budget


def test_definitions_that_fit_are_never_cut(sample, recount):
    budget, _, _, chunks = sample
    bounds = {}
    for chunk in chunks:
        for loc in chunk["locations"]:
            bounds.setdefault(loc["path"], []).append((loc["start_byte"], loc["end_byte"]))
    checked = 0
    for path, spans in bounds.items():
        language = {"py": "python", "go": "go", "rs": "rust", "ts": "typescript"}.get(
            path.rsplit(".", 1)[-1]
        )
        if language is None:
            continue
        data = (SAMPLE / path).read_bytes()
        tree = parser_for(language).parse(data)
        for entity in all_entities(tree.root_node):
            # an entity that fits even with the deepest possible scope header must be whole
            text = data[entity.start : entity.end].decode("utf-8", errors="replace")
            if recount(text) + 40 <= budget:
                assert any(s <= entity.start and entity.end <= e for s, e in spans), (
                    f"{path}: {entity.label} was cut"
                )
                checked += 1
    assert checked > 20


def test_large_entities_are_split_with_scope_headers(tmp_path, tokenizer):
    _, _, chunks = run(
        SAMPLE, tmp_path / "c.jsonl", tokenizer, max_tokens=96, include=("src/kvstore/server.py",)
    )
    scopes = [c["scope"] for c in chunks]
    assert "src/kvstore/server.py · class ConnectionHandler · def dispatch" in scopes
    inner = [c for c in chunks if SEPARATOR in c["scope"]]
    assert inner and all(not c["mid_line"] for c in chunks)


def test_exact_and_near_duplicates_and_repeated_spans(sample):
    _, result, _, chunks = sample
    summary = result.summary
    assert summary.exact_duplicates_folded >= 1
    retry = [
        c
        for c in chunks
        if any(loc["path"] == "src/kvstore/legacy/retry.py" for loc in c["locations"])
    ]
    assert retry and all(len(c["locations"]) == 2 for c in retry)  # same file twice: folded
    assert summary.near_duplicates_marked >= 1
    assert summary.repeated_spans >= 1


def test_registry_ranks_central_definitions_first(sample):
    _budget, _, _, _ = sample
    registry_path = next(p for p in sample[1].out.parent.glob("*.registry.json"))
    registry = json.loads(registry_path.read_text())
    entries = registry["chunks"]
    assert [e["rank"] for e in entries] == sorted((e["rank"] for e in entries), reverse=True)
    types = {e["type"] for e in entries}
    assert {"function", "class", "doc", "test", "config"} <= types
    lru = next(e for e in entries if any(x["name"] == "LRUCache" for x in e["entities"]))
    median = sorted(e["rank"] for e in entries)[len(entries) // 2]
    assert lru["rank"] > median and lru["referenced_by"] >= 1
    assert registry["repeated_spans"]


def test_non_utf8_file_is_reported_with_exact_offsets(sample):
    _, result, _, chunks = sample
    assert "src/kvstore/legacy/customers_latin1.py" in result.summary.non_utf8_files
    parts = [c for c in chunks if c["path"] == "src/kvstore/legacy/customers_latin1.py"]
    data = (SAMPLE / "src/kvstore/legacy/customers_latin1.py").read_bytes()
    assert parts[-1]["end_byte"] == len(data)
    assert "\ufffd" in "".join(p["text"] for p in parts)


def test_same_input_same_bytes_and_parallel_equals_serial(tmp_path, tokenizer):
    run(SAMPLE, tmp_path / "a.jsonl", tokenizer)
    run(SAMPLE, tmp_path / "b.jsonl", tokenizer, jobs=2)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_second_run_is_served_from_the_cache(tmp_path, tokenizer):
    first, _, _ = run(SAMPLE, tmp_path / "a.jsonl", tokenizer, use_cache=True)
    second, _, _ = run(SAMPLE, tmp_path / "b.jsonl", tokenizer, use_cache=True)
    assert second.summary.cache_hits == second.summary.files
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert first.summary.files == second.summary.files


def test_code_differing_only_in_comments_and_spacing_is_a_near_duplicate(tmp_path, tokenizer):
    body = "".join(
        f"def handler_{i}(request, store):\n"
        f"    value = store.get(request.key_{i})\n"
        f"    if value is None:\n        raise KeyError(request.key_{i})\n"
        f"    return [item * {i} for item in value if item]\n\n\n"
        for i in range(6)
    )
    noisy = body.replace("    value =", "    # fetch it first\n    value  =").replace(
        "return [", "return  [  "
    )
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "a.py").write_text(body)
    (tmp_path / "repo" / "b.py").write_text(noisy)
    _, _, chunks = run(tmp_path / "repo", tmp_path / "c.jsonl", tokenizer, max_tokens=100)
    near = [c for c in chunks if c["path"] == "b.py" and "near_duplicate_of" in c]
    assert len(near) == 6


def test_an_edited_cache_entry_is_redone_not_used(tmp_path, tokenizer, monkeypatch):
    from copilot_cli.core.fingerprints import cache_dir

    monkeypatch.setenv("COPILOT_OPT_CACHE_DIR", str(tmp_path / "cache"))  # only this run's entries

    first, _, chunks = run(SAMPLE, tmp_path / "a.jsonl", tokenizer, use_cache=True)
    entries = sorted(
        p for p in (cache_dir() / "chunks").glob("*.json") if not p.name.startswith("repeats-")
    )
    assert len(entries) >= first.summary.files
    victim = max(entries, key=lambda p: p.stat().st_size)
    digest, _, body = victim.read_bytes().partition(b"\n")
    victim.write_bytes(digest + b"\n" + body.replace(b'"token_count":', b'"token_count":1', 1))
    second, _, again = run(SAMPLE, tmp_path / "b.jsonl", tokenizer, use_cache=True)
    assert second.summary.cache_hits == second.summary.files - 1
    assert again == chunks
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_repeated_spans_are_read_back_only_for_the_same_files(tmp_path, tokenizer):
    from copilot_cli.core.fingerprints import cache_dir

    shared = "".join(f"limit_{i} = settings.get('limit_{i}', {i})\n" for i in range(12))
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("import settings\n" + shared)
    (repo / "b.py").write_text("import os\n\n" + shared + "print(os.sep)\n")

    def spans(name: str) -> list:
        registry = tmp_path / f"{name}.registry.json"
        run(repo, tmp_path / f"{name}.jsonl", tokenizer, use_cache=True, registry=registry)
        return json.loads(registry.read_text())["repeated_spans"]

    before = set((cache_dir() / "chunks").glob("repeats-*.json"))
    fresh = spans("first")
    (entry,) = set((cache_dir() / "chunks").glob("repeats-*.json")) - before
    assert [s["lines"] for s in fresh] == [12]
    assert spans("again") == fresh
    digest, _, body = entry.read_bytes().partition(b"\n")
    entry.write_bytes(digest + b"\n" + body.replace(b'"lines":12', b'"lines":13'))
    assert spans("edited-entry") == fresh  # a damaged entry is recomputed, never used
    (repo / "b.py").write_text("import os\n")
    assert spans("edited-file") == []
