"""The output guard: a folder or file is written only if it is new, empty, or copilot-opt's own
artifact of the same kind; anything else is refused before any work, nothing touched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from copilot_cli.core.artifacts import save_safetensors
from copilot_cli.core.options import OptionError
from copilot_cli.core.outputs import (
    MARKER,
    claim_file,
    claim_folder,
    mark,
    remember_written,
    sniff_format,
)

KV = {"fmt": "copilot-opt.kv-cache", "manifest": "index.json", "label": "KV folder"}


def test_new_empty_locked_marked_or_manifested_folders_are_ours(tmp_path):
    claim_folder(tmp_path / "new" / "kv", "out", **KV)  # does not exist yet
    assert not (tmp_path / "new").exists()  # claiming writes nothing
    empty = tmp_path / "empty"
    empty.mkdir()
    claim_folder(empty, "out", **KV)
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / ".copilot-opt.lock").write_text("123")  # a writer that has just started
    claim_folder(locked, "out", **KV)
    racing = tmp_path / "racing"  # another run is renaming its marker into place right now
    racing.mkdir()
    (racing / f".{MARKER}.4242.x1y2z3.tmp").write_text('{"format": "copilot-opt.kv-cache"}')
    claim_folder(racing, "out", **KV)
    marked = tmp_path / "marked"
    mark(marked, KV["fmt"])
    (marked / "segments").mkdir()  # a first run killed before its index
    claim_folder(marked, "out", **KV)
    manifested = tmp_path / "older"
    manifested.mkdir()
    (manifested / "index.json").write_text(json.dumps({"format": KV["fmt"]}))
    claim_folder(manifested, "out", **KV)


@pytest.mark.parametrize(
    "entries",
    [[".bashrc"], [".ssh/id_ed25519"], [".git/HEAD"], [".env", ".cache/x"], ["notes.txt"]],
)
def test_a_folder_holding_anything_else_is_refused(tmp_path, entries):
    for entry in entries:
        (tmp_path / entry).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / entry).write_text("keep")
    with pytest.raises(OptionError, match="did not write") as info:
        claim_folder(tmp_path, "out", **KV)
    assert info.value.option == "out" and str(tmp_path) in info.value.message
    assert all((tmp_path / e).read_text() == "keep" for e in entries)


def test_another_kind_of_artifact_is_named(tmp_path):
    mark(tmp_path, "copilot-opt.prompt-bundle")
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(OptionError, match=r"holds a copilot-opt\.prompt-bundle artifact"):
        claim_folder(tmp_path, "out", **KV)


def test_a_folder_replaced_as_a_whole_holds_only_what_its_writer_owns(tmp_path):
    quant = {"fmt": "copilot-opt.q", "manifest": "t.safetensors", "label": "q", "owned": ["t"]}
    mark(tmp_path, quant["fmt"])
    (tmp_path / "t").write_text("mine")
    claim_folder(tmp_path, "out", **quant)
    (tmp_path / ".hidden").write_text("theirs")
    with pytest.raises(OptionError, match=r"\.hidden"):
        claim_folder(tmp_path, "out", **quant)


def test_paths_below_a_regular_file_and_the_wrong_kind_are_refused(tmp_path):
    file = tmp_path / "f"
    file.write_text("x")
    with pytest.raises(OptionError, match="is a file, not a folder"):
        claim_folder(file / "kv", "out", **KV)
    with pytest.raises(OptionError, match="is a file, not a folder"):
        claim_file(file / "deep" / "c.jsonl", "out", fmt="copilot-opt.chunks", label="c")
    with pytest.raises(OptionError, match="not a folder"):
        claim_folder(file, "out", **KV)
    with pytest.raises(OptionError, match="is a folder"):
        claim_file(tmp_path, "out", fmt="copilot-opt.chunks", label="c")


def test_files_are_recognised_by_header_signature_or_record(tmp_path):
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(json.dumps({"type": "header", "format": "copilot-opt.chunks"}) + "\n{}\n")
    assert sniff_format(jsonl) == "copilot-opt.chunks"
    claim_file(jsonl, "out", fmt="copilot-opt.chunks", label="chunks file")
    with pytest.raises(OptionError, match=r"is a copilot-opt\.chunks file, not a chunk registry"):
        claim_file(jsonl, "registry", fmt="copilot-opt.chunk-registry", label="chunk registry")
    tensors = tmp_path / "b.safetensors"
    save_safetensors(tensors, {"x": torch.zeros(2)}, {"format": "copilot-opt.regress-baseline"})
    assert sniff_format(tensors) == "copilot-opt.regress-baseline"
    report = tmp_path / "r.md"
    report.write_text("## copilot-opt regress: ok\n")
    claim_file(report, "markdown", signature=b"## copilot-opt regress: ", label="md")
    text = tmp_path / "pruned.txt"
    text.write_text("someone's notes")
    with pytest.raises(OptionError, match="not a pruned text"):
        claim_file(text, "out", label="pruned text")
    text.write_text("what we wrote")
    remember_written(text)
    claim_file(text, "out", label="pruned text")  # those exact bytes: ours
    text.write_text("what we wrote, then edited")
    with pytest.raises(OptionError):
        claim_file(text, "out", label="pruned text")
    empty = tmp_path / "empty"
    empty.touch()
    claim_file(empty, "out", fmt="copilot-opt.chunks", label="chunks file")  # nothing to lose


def test_an_input_of_the_same_run_is_never_an_output(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"format": "copilot-opt.regress-report"}))
    with pytest.raises(OptionError, match="also an input"):
        claim_file(prompts, "json", fmt="copilot-opt.regress-report", label="r", inputs=[prompts])


def test_the_marker_names_the_format(tmp_path):
    mark(tmp_path, "copilot-opt.kv-cache")
    assert json.loads((tmp_path / MARKER).read_text()) == {"format": "copilot-opt.kv-cache"}


_NAMES = st.sampled_from(
    [".bashrc", ".env", ".git", ".ssh", "a.txt", "index.json", ".copilot-opt.lock", "x"]
)


@settings(max_examples=60)
@given(st.lists(st.tuples(_NAMES, st.booleans(), st.binary(max_size=40)), min_size=1, max_size=5))
def test_fuzz_a_folder_is_claimed_only_when_nothing_of_someone_else_is_in_it(entries):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "out"
        root.mkdir()
        for name, is_folder, data in entries:
            path = root / name
            if path.exists():
                continue
            if is_folder:
                path.mkdir()
                (path / "inner").write_bytes(data)
            else:
                path.write_bytes(data)
        before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
        names = {p.name for p in root.iterdir()}
        index = root / "index.json"
        ours = index.is_file() and sniff_format(index) == KV["fmt"]
        try:
            claim_folder(root, "out", **KV)
            accepted = True
        except OptionError:
            accepted = False
        assert accepted == (ours or names <= {".copilot-opt.lock"})
        assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
