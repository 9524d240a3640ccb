"""Ids from the pre-token piece cache equal the tokenizer's own, on any text: plain ASCII from
the cache, other lines through the tokenizer, added tokens turning the cache off."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from copilot_cli.chunking import pretoken
from copilot_cli.chunking.packer import TokenCounter
from copilot_cli.chunking.pretoken import PieceCache

from .conftest import ALPHABET, SAMPLE

# besides the chunker's alphabet: whitespace and control characters the two regex engines
# could class differently, and runs of them next to line feeds
EXTRA = ["\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u3000", "\t\n", " \n", "\n ", "x\n", "}\n\n"]


@pytest.fixture(scope="module")
def caches(tokenizer, trained_tokenizer):
    return {
        "shipped": PieceCache(tokenizer.backend_tokenizer, ()),
        "trained": PieceCache(trained_tokenizer.backend_tokenizer, ()),
    }


def _truth(cache: PieceCache, text: str) -> list[int]:
    return list(cache.backend.encode(text, add_special_tokens=False).ids)


@settings(max_examples=400)
@given(st.lists(st.sampled_from(ALPHABET + EXTRA), min_size=0, max_size=120).map("".join))
def test_ids_and_counts_equal_the_tokenizers(caches, text):
    for cache in caches.values():
        truth = _truth(cache, text)
        assert cache.encode_any(text) == truth, repr(text)
        assert cache.count(text) == len(truth), repr(text)


def _with_foreign_lines(text: str) -> str:
    """Every fifth line followed by one the cache must leave to the tokenizer."""
    lines = text.splitlines(keepends=True)
    for index in range(len(lines) - 1, 0, -5):
        lines.insert(index, "\t// naïve café 说明 🙂\u00a0x\u2028y\n")
    return "".join(lines)


def test_real_files_in_several_languages(caches):
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in SAMPLE.rglob("*") if p.is_file())
    files += [stdlib / name for name in ("argparse.py", "csv.py", "textwrap.py")]
    cache = caches["shipped"]
    plain = 0
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        for variant in (text, _with_foreign_lines(text)):
            assert cache.encode_any(variant) == _truth(cache, variant), path
            assert cache.count(variant) == len(_truth(cache, variant)), path
        plain += cache.applies(text)
        assert not cache.applies(_with_foreign_lines(text) + "é")
    assert plain >= len(files) // 2  # most files take the cache only


def test_the_bpe_model_is_used_directly_only_where_it_agrees(caches):
    assert caches["shipped"].model is not None
    assert caches["trained"].model is not None


def test_a_full_cache_is_dropped_and_refilled_exactly(tokenizer, monkeypatch):
    monkeypatch.setattr(pretoken, "_MAX_PIECES", 50)
    cache = PieceCache(tokenizer.backend_tokenizer, ())
    texts = [p.read_text(errors="replace") for p in sorted(SAMPLE.rglob("*.py"))][:4]
    for text in texts + texts:  # each text overflows the cache filled by the one before
        pieces = set(pretoken._PATTERN.findall(text))
        assert cache.encode_any(text) == _truth(cache, text)
        assert pieces <= cache.ids.keys() and len(cache.ids) <= max(50, len(pieces))


def test_added_tokens_go_through_the_tokenizer(tokenizer):
    counter = TokenCounter(tokenizer)
    special = tokenizer.eos_token
    text = f"x = '{special}'\nreturn y\n"
    assert not counter.pieces.applies(text)
    truth = tokenizer(text, add_special_tokens=False).input_ids
    assert counter.pieces.encode_any(text) == truth
    assert counter.count(text) == len(truth)
    assert special in tokenizer.convert_ids_to_tokens(truth)


def test_other_pre_tokenizers_take_no_shortcut(qwen_style_tokenizer):
    counter = TokenCounter(qwen_style_tokenizer)
    assert counter.pieces is None
    text = "x = 12345 + 'abc'\n"
    assert counter.count(text) == len(counter.tokenizer(text, add_special_tokens=False).input_ids)
