"""Chunk token counts derived from the file's one tokenizer pass equal a fresh encode of the
chunk (header included), for every tokenizer the rule admits; others recount."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from copilot_cli.chunking.packer import FileText, Packer, TokenCounter

from .conftest import SAMPLE, run

# every character class the pre-tokenizer distinguishes, the apostrophe of contractions,
# whitespace runs and multi-byte characters
ALPHABET = list("abcXYZ_019'\"()[]{}.,:;=+-*/#@\\") + [" ", "  ", "\t", "\n", "\n\n", "    "]
ALPHABET += ["é", "中", "🙂", "'s", "'ll", "\r\n", "\u00a0"]
HEADERS = ["", "src/app.py · class Stack · def push\n", "def push\n", "x\n"]


def _texts():
    return st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=80).map("".join)


def _trained_byte_level() -> PreTrainedTokenizerFast:
    """A second byte-level BPE (GPT-2 regex), trained here on the sample repository."""
    corpus = [p.read_text(errors="replace") for p in sorted(SAMPLE.rglob("*.py"))]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer)


def _qwen_style(tokenizer) -> PreTrainedTokenizerFast:
    """The shipped vocabulary behind a Llama-3/Qwen2-style digit-splitting regex: not
    admitted by the rule (counts must fall back to encoding every chunk)."""
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    spec["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [
            {
                "type": "Split",
                "pattern": {"Regex": r"\p{N}{1,3}| ?\p{L}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+"},
                "behavior": "Isolated",
                "invert": False,
            },
            {
                "type": "ByteLevel",
                "add_prefix_space": False,
                "trim_offsets": False,
                "use_regex": False,
            },
        ],
    }
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)))


@pytest.fixture(scope="module")
def counters(tokenizer):
    return {
        "shipped": TokenCounter(tokenizer),
        "trained": TokenCounter(_trained_byte_level()),
        "qwen-style": TokenCounter(_qwen_style(tokenizer)),
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


def test_the_rule_admits_byte_level_gpt2_regex_only(counters):
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
