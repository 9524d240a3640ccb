"""chunk's splitting rule remembered by the tokenizer's source files (chunking/rules.py,
core.fingerprints.tokenizer_source_key): read back it is the rule derived from the backend
JSON, a change of the files or of the code makes a new one, and chunks come out the same."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoTokenizer

from copilot_cli.chunking import rules
from copilot_cli.chunking.rules import RULES_FOLDER, chunk_rule
from copilot_cli.core.fingerprints import (
    cache_dir,
    forget_tokenizer_facts,
    tokenizer_fingerprint,
    tokenizer_source_key,
)
from copilot_cli.core.models import SHIPPED_MODEL, load_tokenizer
from tests.chunking.conftest import run


def _copy_tokenizer(source: Path, target: Path) -> Path:
    target.mkdir(parents=True)
    for file in source.iterdir():
        if file.is_file() and not file.name.endswith((".safetensors", ".bin")):
            shutil.copy2(file, target / file.name)
    return target


@pytest.fixture()
def derivations(monkeypatch):
    """How often the rule is derived from the backend JSON (the real derivation, counted),
    from an empty rule cache (the key is the files' content: copies share one)."""
    shutil.rmtree(cache_dir() / RULES_FOLDER, ignore_errors=True)
    calls = []
    derive = rules.splitting_rule
    monkeypatch.setattr(rules, "splitting_rule", lambda t: calls.append(1) or derive(t))
    return calls


def _same(a, b):
    assert (a[0] and a[0].name, a[1]) == (b[0] and b[0].name, b[1])
    assert (a[2] is None) == (b[2] is None)
    if a[2] is not None:
        assert a[2].dtype == b[2].dtype and np.array_equal(a[2], b[2])


@pytest.mark.parametrize("kind", ["byte-level", "sentencepiece"])
def test_the_rule_read_back_is_the_rule_derived(
    kind, sentencepiece_tokenizer, tmp_path, derivations
):
    folder = tmp_path / "tok"
    if kind == "byte-level":
        _copy_tokenizer(SHIPPED_MODEL, folder)
    else:
        sentencepiece_tokenizer.save_pretrained(folder)
    first = load_tokenizer(str(folder))
    derived = chunk_rule(first)
    assert len(derivations) == 1
    assert list((cache_dir() / RULES_FOLDER).glob(f"{tokenizer_source_key(first)}-*.npz"))

    again = load_tokenizer(str(folder))  # a later run: same files, rule read back
    _same(chunk_rule(again), derived)
    assert len(derivations) == 1
    assert derived[0] is not None and derived[0].name == (
        "gpt2" if kind == "byte-level" else "sentencepiece"
    )


def test_changed_files_get_a_new_key_and_their_own_rule(tmp_path, derivations):
    folder = _copy_tokenizer(SHIPPED_MODEL, tmp_path / "tok")
    before = load_tokenizer(str(folder))
    key, rule = tokenizer_source_key(before), chunk_rule(before)

    edited = AutoTokenizer.from_pretrained(folder)
    edited.add_tokens(["<|cursor|>"], special_tokens=True)
    edited.save_pretrained(folder)
    after = load_tokenizer(str(folder))
    assert tokenizer_source_key(after) not in (None, key)
    assert "<|cursor|>" in chunk_rule(after)[1] and "<|cursor|>" not in rule[1]
    assert len(derivations) == 2
    assert tokenizer_fingerprint(after) != tokenizer_fingerprint(before)


def test_a_tokenizer_not_loaded_from_files_by_us_is_described_by_its_backend(tmp_path, derivations):
    """One a caller built (or changed) has no source key: its facts come from its backend
    JSON every time, and agree with the remembered ones of the same files."""
    folder = _copy_tokenizer(SHIPPED_MODEL, tmp_path / "tok")
    ours = load_tokenizer(str(folder))
    theirs = AutoTokenizer.from_pretrained(folder)
    assert tokenizer_source_key(theirs) is None and tokenizer_source_key(ours) is not None
    assert tokenizer_fingerprint(theirs) == tokenizer_fingerprint(ours)
    _same(chunk_rule(theirs), chunk_rule(ours))
    forget_tokenizer_facts(theirs)
    chunk_rule(theirs)
    assert len(derivations) == 3  # ours once (then remembered), theirs each time


def test_a_damaged_rule_file_is_derived_again(tmp_path, derivations):
    folder = _copy_tokenizer(SHIPPED_MODEL, tmp_path / "tok")
    derived = chunk_rule(load_tokenizer(str(folder)))
    (stored,) = (cache_dir() / RULES_FOLDER).glob(
        f"{tokenizer_source_key(load_tokenizer(str(folder)))}-*.npz"
    )
    stored.write_bytes(b"not a rule")
    _same(chunk_rule(load_tokenizer(str(folder))), derived)
    assert len(derivations) == 2
    assert stored.read_bytes() != b"not a rule"  # written again


def test_chunks_are_the_same_whether_the_rule_is_derived_or_read_back(tmp_path):
    folder = _copy_tokenizer(SHIPPED_MODEL, tmp_path / "tok")
    repo = SHIPPED_MODEL.parents[1] / "repo"
    cold, warm = tmp_path / "cold.jsonl", tmp_path / "warm.jsonl"
    shutil.rmtree(cache_dir() / RULES_FOLDER, ignore_errors=True)
    run(repo, cold, load_tokenizer(str(folder)), use_cache=False)
    run(repo, warm, load_tokenizer(str(folder)), use_cache=False)
    assert cold.read_bytes() == warm.read_bytes()
