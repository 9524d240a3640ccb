"""Each pre-tokenizer family (families.py) against the tokenizers library running the same
pre-tokenizer: the plain-text regex finds exactly its pieces, anchors are boundaries in every
substring, and the piece cache and derived chunk counts equal the tokenizer's own."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from copilot_cli.chunking import families
from copilot_cli.chunking.packer import FileText, TokenCounter, _anchors
from copilot_cli.chunking.pretoken import PieceCache

from .conftest import ALPHABET
from .test_exact_counts import HEADERS, _check


def _split(regex: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


def _byte_level(regex: bool) -> dict:
    return {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": False,
        "use_regex": regex,
    }


PRE_TOKENIZERS = {
    "gpt2": _byte_level(True),
    "digits": {
        "type": "Sequence",
        "pretokenizers": [{"type": "Digits", "individual_digits": True}, _byte_level(True)],
    },
    "qwen2": {
        "type": "Sequence",
        "pretokenizers": [_split(families.QWEN2_REGEX), _byte_level(False)],
    },
    "llama3": {
        "type": "Sequence",
        "pretokenizers": [_split(families.LLAMA3_REGEXES[1]), _byte_level(False)],
    },
    "deepseek": {
        "type": "Sequence",
        "pretokenizers": [*map(_split, families.DEEPSEEK_SPLITS), _byte_level(False)],
    },
}
PLAIN = list("abXY_09'\"()[]{}.,:;=+-*/#@\\$<>|~`^!?%&") + [" ", "  ", "\t", "\n", "\r\n", "\r"]
PLAIN += ["'s", "'LL", "123", "4567", "    ", " \n", "\n\n", "x\n", "}\n"]


@pytest.fixture(scope="module")
def family_tokenizers(tokenizer):
    """The shipped vocabulary behind each family's pre-tokenizer (qwen2 with NFC too)."""
    out = {}
    for name, pre in PRE_TOKENIZERS.items():
        spec = json.loads(tokenizer.backend_tokenizer.to_str())
        spec["pre_tokenizer"] = pre
        if name == "qwen2":
            spec["normalizer"] = {"type": "NFC"}
        out[name] = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)))
    return out


def _spans(backend, text: str) -> list[tuple[int, int]]:
    return [span for _, span in backend.pre_tokenizer.pre_tokenize_str(text)]


def test_each_family_is_recognised_and_others_are_not(family_tokenizers, qwen_style_tokenizer):
    for name, tokenizer in family_tokenizers.items():
        assert families.family_of_backend(tokenizer.backend_tokenizer).name == name
    assert families.family_of_backend(qwen_style_tokenizer.backend_tokenizer) is None
    spec = json.loads(family_tokenizers["gpt2"].backend_tokenizer.to_str())
    spec["normalizer"] = {"type": "Lowercase"}
    assert families.family_of(spec) is None  # a normalizer that changes plain text


@settings(max_examples=300)
@given(st.lists(st.sampled_from(PLAIN), min_size=0, max_size=80).map("".join))
def test_the_plain_text_regex_finds_the_pre_tokenizers_pieces(family_tokenizers, text):
    for name, tokenizer in family_tokenizers.items():
        family = families.family_of_backend(tokenizer.backend_tokenizer)
        ours = [m.span() for m in family.pieces.finditer(text)]
        assert ours == _spans(tokenizer.backend_tokenizer, text), (name, text)


def _char_of_byte(text: str) -> dict[int, int]:
    out, position = {}, 0
    for index, char in enumerate(text):
        out[position] = index
        position += len(char.encode())
    out[position] = len(text)
    return out


@settings(max_examples=300)
@given(
    st.lists(st.sampled_from(ALPHABET + PLAIN), min_size=2, max_size=80).map("".join),
    st.integers(0, 400),
    st.integers(0, 400),
)
def test_anchors_are_boundaries_in_every_substring(family_tokenizers, text, left, right):
    """Between the first and last anchor inside any substring, its pieces are the text's."""
    raw = text.encode()
    chars = _char_of_byte(text)
    start, end = sorted((min(left, len(text)), min(right, len(text))))
    for name, tokenizer in family_tokenizers.items():
        backend = tokenizer.backend_tokenizer
        import numpy as np

        anchors = [
            chars[int(p)]
            for p in _anchors(
                np.frombuffer(raw, dtype=np.uint8), families.family_of_backend(backend)
            )
        ]
        inside = [a for a in anchors if start < a < end]
        if len(inside) < 2:
            continue
        a, b = inside[0], inside[-1]
        whole = [s for s in _spans(backend, text) if a <= s[0] and s[1] <= b]
        part = [
            (s + start, e + start)
            for s, e in _spans(backend, text[start:end])
            if a <= s + start and e + start <= b
        ]
        assert part == whole and part[0][0] == a and part[-1][1] == b, (name, text, start, end)


@settings(max_examples=200)
@given(st.lists(st.sampled_from(ALPHABET + PLAIN), min_size=0, max_size=100).map("".join))
def test_the_piece_cache_gives_the_tokenizers_ids(family_tokenizers, text):
    for name, tokenizer in family_tokenizers.items():
        backend = tokenizer.backend_tokenizer
        cache = PieceCache(backend, (), families.family_of_backend(backend))
        truth = backend.encode(text, add_special_tokens=False).ids
        assert cache.encode_any(text) == truth, (name, text)
        assert cache.count(text) == len(truth), (name, text)


@settings(max_examples=150)
@given(
    text=st.lists(st.sampled_from(ALPHABET + PLAIN), min_size=1, max_size=80).map("".join),
    cuts=st.lists(st.integers(0, 400), max_size=6),
    header=st.sampled_from(HEADERS),
)
def test_derived_chunk_counts_equal_a_fresh_encode(family_tokenizers, text, cuts, header):
    cuts = [min(c, len(text)) for c in cuts]
    for tokenizer in family_tokenizers.values():
        counter = TokenCounter(tokenizer)
        assert counter.additive
        _check(counter, text, cuts, header)


def test_derivation_is_really_used(family_tokenizers):
    """Anchors exist in ordinary code for every family (else nothing would be derived)."""
    code = "def area(w, h):\n    return w * h + 10\n\nclass Box(object):\n    size = [1, 2]\n"
    for name, tokenizer in family_tokenizers.items():
        file = FileText(code.encode())
        file.attach_token_starts(TokenCounter(tokenizer))
        assert file.anchors is not None and len(file.anchors) >= 8, name


# what a SentencePiece text may hold beyond the others: "▁" spelled in the text itself, next
# to spaces, and bytes with no vocabulary entry (byte fallback)
SP_TEXT = ALPHABET + PLAIN + ["\u2581", " \u2581", "\u2581 ", "\x01", "日本", "  \u2581x"]


def test_sentencepiece_is_recognised_only_when_no_entry_holds_a_space_after_text(
    sentencepiece_tokenizer,
):
    from tests.chunking.conftest import _sentencepiece

    counter = TokenCounter(sentencepiece_tokenizer)
    assert counter.family is families.SENTENCEPIECE and counter.pieces.model is not None
    assert families.family_of_backend(_sentencepiece(False).backend_tokenizer) is None
    spec = json.loads(sentencepiece_tokenizer.backend_tokenizer.to_str())
    spec["normalizer"]["normalizers"] = spec["normalizer"]["normalizers"][1:]  # no Prepend
    assert families.family_of(spec) is None


@settings(max_examples=300)
@given(st.lists(st.sampled_from(SP_TEXT), min_size=0, max_size=100).map("".join))
def test_sentencepiece_pieces_give_the_whole_texts_ids(sentencepiece_tokenizer, text):
    """Whole-text BPE = BPE of each space-run-then-text piece; the "▁" prepended once."""
    counter = TokenCounter(sentencepiece_tokenizer)
    truth = sentencepiece_tokenizer(text, add_special_tokens=False).input_ids
    assert counter.pieces.encode_any(text) == truth
    assert counter.count(text) == len(truth)


@settings(max_examples=200)
@given(
    text=st.lists(st.sampled_from(SP_TEXT), min_size=1, max_size=80).map("".join),
    cuts=st.lists(st.integers(0, 400), max_size=6),
    header=st.sampled_from(HEADERS),
)
def test_sentencepiece_derived_chunk_counts_equal_a_fresh_encode(
    sentencepiece_tokenizer, text, cuts, header
):
    """A chunk counted from the file pass (its middle) plus its two edges, the tail without
    the prepended "▁", equals the chunk encoded alone."""
    counter = TokenCounter(sentencepiece_tokenizer)
    _check(counter, text, [min(c, len(text)) for c in cuts], header)


def test_sentencepiece_files_use_the_piece_cache_and_anchors(sentencepiece_tokenizer):
    code = "def area(w, h):\n    return w * h + 10\n\nclass Box(object):\n    size = [1, 2]\n"
    counter = TokenCounter(sentencepiece_tokenizer)
    file = FileText(code.encode())
    file.attach_token_starts(counter)
    assert counter.byte_starts(code, len(code.encode())) is not None  # no offsets pass
    assert file.anchors is not None and len(file.anchors) >= 8
