"""Chunks files, registries and context-index cache entries edited and resealed (their digests
recomputed, as anyone can): a record that is not what it claims is refused by every consumer
with one line naming the file, the record and the field (exit 2), never an internal error; a
forged cache entry is rebuilt, never trusted."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from copilot_cli.cli import app
from copilot_cli.core.artifacts import DIGEST_KEY, canonical_json, sealed
from copilot_cli.core.errors import CopilotError
from tests.conftest import REPO_ROOT
from tests.test_artifact_fuzz import HOSTILE, _paths, _set

SAMPLE = REPO_ROOT / "sample_data" / "repo"
REQUEST = ["--file", "src/kvstore/server.py", "--cursor", "30", "--budget", "400"]


def _write_chunks(path: Path, header: dict, records: list[dict]) -> None:
    """A chunks file with `records`, its header's digest recomputed to match."""
    from copilot_cli.chunking.format import chunks_digest

    def line(value: Any) -> bytes:  # json, not orjson: it writes numbers orjson cannot hold
        return (json.dumps(value, sort_keys=True, separators=(",", ":")) + "\n").encode()

    lines = [line(r) for r in records]
    header = {k: v for k, v in header.items() if k != "digest"}
    header["digest"] = chunks_digest(header, lines)
    path.write_bytes(line(header) + b"".join(lines))


def _load_chunks(path: Path) -> tuple[dict, list[dict]]:
    lines = path.read_bytes().splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def _reseal_registry(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    data.pop(DIGEST_KEY)
    edit(data)
    path.write_text(canonical_json(sealed(data)))


@pytest.fixture()
def pair(shipped_artifacts, tmp_path) -> dict[str, Path]:
    out, _ = shipped_artifacts
    chunks = Path(shutil.copy(out / "chunks.jsonl", tmp_path / "chunks.jsonl"))
    registry = Path(shutil.copy(out / "registry.json", tmp_path / "registry.json"))
    return {"chunks": chunks, "registry": registry}


def _context(runner, pair, *extra):
    args = ["context", str(pair["chunks"]), "--registry", str(pair["registry"]), "--repo"]
    return runner.invoke(app, [*args, str(SAMPLE), *extra])


def _refused_naming(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output and "internal error" not in result.output
    for word in words:
        assert word in lines[0], (word, lines[0])


def _target(records: list[dict]) -> int:
    """The record the edits hit: one of the file the request is about's neighbours."""
    return next(i for i, r in enumerate(records) if r["path"] == "src/kvstore/lru.py")


CHUNK_EDITS = {
    "locations": [
        None,
        "x",
        [],
        [{"path": "a.py"}],
        [{"path": "/etc/passwd", "start_line": 1, "end_line": 1, "start_byte": 0, "end_byte": 1}],
    ],
    "path": [None, 7, "../../etc/passwd", ""],
    "id": [None, 5, "0" * 16],
    "text": [None, 3, ["a"]],
    "token_count": [None, "9", -5, True, 1.5],
    "entities": [None, "x", [{"kind": "function"}], [{"name": 3, "kind": "function"}]],
    "start_line": [None, 0, "1"],
    "language": [None, 3],
    "mid_line": [None, "no"],
    "sha256": [None, "0" * 64],
}
_CASES = [(f, v) for f, values in CHUNK_EDITS.items() for v in values] + [
    (f, "<missing>") for f in CHUNK_EDITS
]


@pytest.mark.parametrize(("field", "value"), _CASES, ids=[f"{f}={v!r}"[:40] for f, v in _CASES])
def test_a_resealed_chunk_with_a_bad_field_is_refused_naming_it(
    runner, pair, field, value, tmp_path
):
    header, records = _load_chunks(pair["chunks"])
    i = _target(records)
    if value == "<missing>":
        del records[i][field]
    else:
        records[i][field] = value
    _write_chunks(pair["chunks"], header, records)
    where = [str(pair["chunks"]), f"chunk {i + 1}", f"'{field}"]
    _refused_naming(_context(runner, pair, *REQUEST), *where)
    _refused_naming(_context(runner, pair, "--static"), *where)
    inspected = runner.invoke(app, ["inspect", str(pair["chunks"])])
    assert inspected.exit_code == 1 and f"chunk {i + 1}" in inspected.stderr


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rank", None),
        ("rank", "high"),
        ("rank", float("nan")),
        ("rank", -1),
        ("id", 3),
        ("entities", [{"kind": 1}]),
        ("locations", None),
        ("token_count", "x"),
    ],
)
def test_a_resealed_registry_entry_with_a_bad_field_is_refused_naming_it(
    runner, pair, field, value
):
    _reseal_registry(pair["registry"], lambda r: r["chunks"][3].update({field: value}))
    where = [str(pair["registry"]), "registry entry 4", f"'{field}"]
    _refused_naming(_context(runner, pair, *REQUEST), *where)
    _refused_naming(_context(runner, pair, "--static"), *where)


def test_prefill_kv_chunks_refuses_a_resealed_record(runner, pair, shipped_artifacts, tmp_path):
    out, _ = shipped_artifacts
    header, records = _load_chunks(pair["chunks"])
    i = _target(records)
    records[i]["locations"] = []
    _write_chunks(pair["chunks"], header, records)
    kv = tmp_path / "kv"
    args = ["prefill-kv", str(out / "templates"), "-o", str(kv), "--chunks", str(pair["chunks"])]
    result = runner.invoke(app, [*args, "--registry", str(pair["registry"]), "--top", "4"])
    _refused_naming(result, str(pair["chunks"]), f"chunk {i + 1}", "'locations'")
    assert not kv.exists()


def test_two_chunk_records_swapped_keep_their_own_digests(runner, pair):
    """Records reordered is a different, valid file (each record still its own text); records
    whose texts were swapped under kept ids are refused."""
    header, records = _load_chunks(pair["chunks"])
    a, b = _target(records), _target(records) + 1
    records[a]["text"], records[b]["text"] = records[b]["text"], records[a]["text"]
    _write_chunks(pair["chunks"], header, records)
    _refused_naming(_context(runner, pair, *REQUEST), f"chunk {a + 1}", "'sha256'")


# -- fuzz: any place in a record or registry, any hostile value --------------------------------


@pytest.mark.parametrize("which", ["chunks", "registry"])
def test_resealed_records_fuzz_never_an_internal_error(runner, pair, which):
    from copilot_cli.context import ContextOptions, open_session

    header, records = _load_chunks(pair["chunks"])
    registry = json.loads(pair["registry"].read_text())
    registry.pop(DIGEST_KEY)
    i = _target(records)
    places = _paths(records[i]) if which == "chunks" else _paths(registry["chunks"][2])
    places = [p for p in places if p != ("type",)]

    @settings(max_examples=60, deadline=None)
    @given(where=st.sampled_from(places), value=HOSTILE)
    def check(where: tuple, value: Any) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            chunks, reg = Path(tmp) / "c.jsonl", Path(tmp) / "c.registry.json"
            edited = json.loads(json.dumps(records))
            edited_registry = json.loads(json.dumps(registry))
            if which == "chunks":
                _set(edited[i], where, value)
            else:
                _set(edited_registry["chunks"][2], where, value)
            _write_chunks(chunks, header, edited)
            reg.write_text(canonical_json(sealed(edited_registry)))
            with contextlib.suppress(CopilotError):
                session = open_session(chunks, reg)
                options = ContextOptions(chunks, reg, file="src/kvstore/server.py", prefix="x")
                session.select(options)
                session.overview(
                    __import__("copilot_cli.context").context.OverviewOptions(chunks, reg)
                )
            result = runner.invoke(app, ["inspect", str(reg if which == "registry" else chunks)])
            assert result.exit_code in (0, 1), (where, value, result.output)
            assert "internal error" not in result.output, (where, value, result.output)

    check()


def test_a_forged_context_index_cache_entry_is_rebuilt_not_trusted(pair, tmp_path, monkeypatch):
    from copilot_cli.context import ContextOptions, open_session

    monkeypatch.setenv("COPILOT_OPT_CACHE_DIR", str(tmp_path / "cache"))
    options = ContextOptions(
        pair["chunks"], pair["registry"], file="src/kvstore/server.py", prefix="cache = LRU"
    )
    fresh = open_session(pair["chunks"], pair["registry"]).select(options)
    [entry] = (tmp_path / "cache" / "context").glob("*.json")
    body = orjson.loads(entry.read_bytes().partition(b"\n")[2])
    places = [p for p in _paths(body) if p[0] != "key"]

    @settings(max_examples=60, deadline=None)
    @given(
        where=st.sampled_from([("defs",), ("postings",), ("ids",), *places]),
        value=HOSTILE,
    )
    def check(where: tuple, value: Any) -> None:
        forged = json.loads(json.dumps(body))
        _set(forged, where, value)
        data = json.dumps(forged).encode()
        entry.write_bytes(hashlib.sha256(data).hexdigest().encode() + b"\n" + data)
        again = open_session(pair["chunks"], pair["registry"]).select(options)
        assert [s.id for s in again.snippets] == [s.id for s in fresh.snippets], where
        assert again.text == fresh.text

    check()
    del body["defs"]  # the case: KeyError 'defs' before
    data = orjson.dumps(body)
    entry.write_bytes(hashlib.sha256(data).hexdigest().encode() + b"\n" + data)
    assert open_session(pair["chunks"], pair["registry"]).select(options).text == fresh.text
