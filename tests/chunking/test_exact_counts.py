"""Chunk token counts derived from the file's one tokenizer pass equal a fresh encode of the
chunk (header included), for every tokenizer the rule admits; others recount."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from copilot_cli.chunking.packer import FileText, Packer, TokenCounter

from .conftest import ALPHABET, SAMPLE, run

HEADERS = ["", "src/app.py · class Stack · def push\n", "def push\n", "x\n"]


def _texts():
    return st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=80).map("".join)


@pytest.fixture(scope="module")
def counters(tokenizer, trained_tokenizer, qwen_style_tokenizer):
    return {
        "shipped": TokenCounter(tokenizer),
        "trained": TokenCounter(trained_tokenizer),
        "qwen-style": TokenCounter(qwen_style_tokenizer),
    }


def _check(counter: TokenCounter, text: str, cuts: list[int], header: str) -> None:
    data = text.encode("utf-8")
    file = FileText(data)
    file.attach_token_starts(counter)
    packer = Packer(file, counter, 10_000, "f.py")
    bounds = sorted({len(text[:c].encode()) for c in cuts} | {0, len(data)})
    spans = [(header, s, e) for s in bounds for e in bounds if s < e]
    derived = packer.exact_counts(spans)
    for (h, s, e), n in zip(spans, derived, strict=True):
        fresh = len(counter.tokenizer(h + data[s:e].decode(), add_special_tokens=False).input_ids)
        assert n == fresh, (h, data[s:e])


def test_the_rule_admits_known_families_only(counters):
    assert counters["shipped"].additive
    assert counters["trained"].additive
    assert not counters["qwen-style"].additive


@settings(max_examples=300)
@given(text=_texts(), cuts=st.lists(st.integers(0, 400), max_size=6), h=st.sampled_from(HEADERS))
def test_derived_counts_equal_a_fresh_encode(counters, text, cuts, h):
    cuts = [min(c, len(text)) for c in cuts]
    for counter in counters.values():
        _check(counter, text, cuts, h)


def test_an_added_token_in_the_file_turns_derivation_off(tokenizer, counters):
    special = tokenizer.eos_token
    text = f"def f():\n    return '{special}' + x\n\nclass A:\n    pass\n"
    file = FileText(text.encode())
    file.attach_token_starts(counters["shipped"])
    assert file.anchors is None
    _check(counters["shipped"], text, [3, 20, len(text) - 5], "def f\n")


def test_real_files_every_chunk_count_is_exact(tmp_path, tokenizer, recount):
    """Every chunk of the sample repository (several languages), at two budgets."""
    for budget in (64, 384):
        _, _, records = run(
            SAMPLE, tmp_path / f"chunks-{budget}.jsonl", tokenizer, max_tokens=budget
        )
        assert len(records) > 20
        for record in records:
            fresh = recount(record["header"] + record["text"])
            assert record["token_count"] == fresh <= budget
