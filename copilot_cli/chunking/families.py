"""Pre-tokenizer families whose pieces chunk may cache and whose chunk counts it may derive.

A byte-level BPE tokenizer encodes each pre-token piece on its own: the ids of a text are the
ids of its pieces. Where we know the pre-tokenizer exactly, two shortcuts are exact:

- pieces of plain text (printable ASCII, tab, line feed, carriage return) are found by a Python
  regex that splits plain text exactly as the tokenizer's own pre-tokenizer does, and their ids
  come from a cache (pretoken.PieceCache);
- two adjacent non-space characters that no piece can hold together in *any* text ("anchors")
  let a chunk's count come from the file's one tokenizer pass, only its edges encoded again
  (packer.FileText.derivable).

Each family below is recognised from tokenizer.json (pre-tokenizer, normalizer, model) and
nothing else; a tokenizer that matches none recounts every chunk (exact, slower). The regexes
split plain text as these pre-tokenizers do (tests/chunking/test_families.py compares both on
random text), the anchor rules follow from the patterns:

family    pre-tokenizer (tokenizer.json)                    who uses it          anchors
gpt2      ByteLevel, GPT-2 regex                            GPT-2, the shipped   class changes
                                                            model                among L, D, O
digits    \\p{N} isolated, then ByteLevel GPT-2 regex        StarCoder2, SmolLM   + digit|digit
qwen2     Split(Qwen2 regex), ByteLevel without regex       Qwen2, Qwen2.5       L|D L|O D|* O|D
llama3    Split(Llama-3 regex: \\p{N}{1,3}), ByteLevel       Llama 3              L|D L|O D|L D|O
                                                                                 O|D
deepseek  Splits [\\r\\n], \\s?\\p{L}+, \\s?\\p{P}+, CJK,    DeepSeek-Coder       class changes
          \\p{N}, ByteLevel without regex (llama.cpp's)                         among L D P S
                                                                                 + digit|digit
sentencepiece  none; Prepend + Replace normalizers,      CodeLlama, Llama 2   x|space
          byte fallback (see below)

(L letter, D digit, O any other visible character, P punctuation, S symbol; "a|b": a
boundary between a character of class a and one of class b.)

SentencePiece BPE (CodeLlama, Llama 2: normalizers Prepend "▁" + Replace " " -> "▁", no
pre-tokenizer, byte fallback) runs BPE over the whole text, but where no vocabulary entry holds
"▁" after another character (checked on the vocabulary itself: SentencePiece's
split_by_whitespace), no merge can join a character to a following "▁": the text falls into
pieces, each a run of spaces then a run of non-spaces, encoded on their own. Pieces hold any
character (the split looks at U+0020 alone), so the whole text is cached, not only plain ASCII;
the anchors are a non-space followed by a space; the only thing not additive is the "▁"
prepended to a whole text, which a continuation (the tail of a derived chunk) does not get.
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from copilot_cli.core import lazy

np = lazy.module("numpy")

WS, LETTER, DIGIT, PUNCT, SYMBOL, UNKNOWN = range(6)
_PUNCT = "".join(c for c in string.punctuation if unicodedata.category(c).startswith("P"))
_P = "[" + re.escape(_PUNCT) + "]"

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_REGEXES = (
    QWEN2_REGEX.replace(r"|\p{N}|", r"|\p{N}{1,3}|"),
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
)
DEEPSEEK_SPLITS = (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+", r"\p{N}")

_QWEN2_PIECES = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|{digits}"
    r"| ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_DEEPSEEK_STARTS = rf"[\r\n]|[^\S\r\n]?[A-Za-z]|[^\S\r\n]?{_P}|[0-9]"


@dataclass(frozen=True)
class Family:
    """How one pre-tokenizer splits plain text, and where it always splits."""

    name: str
    pieces: re.Pattern[str]  # the pieces of plain text, in order
    line_breaks: re.Pattern[str]  # line feeds that start a piece in any text
    anchors: Callable[[Any, Any, Any], Any]  # (left classes, right classes, bytes) -> bool
    # SentencePiece: the text's pieces are those of " " + text (the prepended "▁"), anchors
    # are taken from the bytes alone (`raw_anchors`), and pieces are encoded with "▁" for " "
    prepend: bool = False
    raw_anchors: Callable[[Any], Any] | None = None


def _gpt2_anchors(left: Any, right: Any, raw: Any) -> Any:
    other_left = (left == PUNCT) | (left == SYMBOL)
    other_right = (right == PUNCT) | (right == SYMBOL)
    differ = (left != right) & ~(other_left & other_right)
    return differ & ~((raw[:-1] == ord("'")) & (right == LETTER))


def _digits_anchors(left: Any, right: Any, raw: Any) -> Any:
    return _gpt2_anchors(left, right, raw) | ((left == DIGIT) & (right == DIGIT))


def _llama3_anchors(left: Any, right: Any, raw: Any) -> Any:
    other_left = (left == PUNCT) | (left == SYMBOL)
    return (
        ((left == LETTER) & (right != LETTER))
        | ((left == DIGIT) & (right != DIGIT))
        | (other_left & (right == DIGIT))
    )


def _qwen2_anchors(left: Any, right: Any, raw: Any) -> Any:
    return _llama3_anchors(left, right, raw) | ((left == DIGIT) & (right == DIGIT))


def _deepseek_anchors(left: Any, right: Any, raw: Any) -> Any:
    return (left != right) | (left == DIGIT)


GPT2 = Family(
    "gpt2",
    re.compile(
        r"'(?:[st]|re|ve|m|ll|d)| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+", re.ASCII
    ),
    re.compile(r"(?<=[!-~])(?=\n)"),
    _gpt2_anchors,
)
DIGITS = Family(
    "digits",
    # each digit is its own segment: a space run before one is a whole piece
    re.compile(
        r"'(?:[st]|re|ve|m|ll|d)| ?[A-Za-z]+|[0-9]| ?[^\sA-Za-z0-9]+|\s+(?=[0-9])|\s+(?!\S)|\s+",
        re.ASCII,
    ),
    re.compile(r"(?<=[!-~])(?=\n)"),
    _digits_anchors,
)
QWEN2 = Family(
    "qwen2",
    re.compile(_QWEN2_PIECES.replace("{digits}", "[0-9]"), re.ASCII),
    re.compile(r"(?<=[A-Za-z0-9])(?=\n)"),  # after punctuation or space a line feed joins
    _qwen2_anchors,
)
LLAMA3 = Family(
    "llama3",
    re.compile(_QWEN2_PIECES.replace("{digits}", "[0-9]{1,3}"), re.ASCII),
    re.compile(r"(?<=[A-Za-z0-9])(?=\n)"),
    _llama3_anchors,
)
DEEPSEEK = Family(
    "deepseek",
    # the splits run one after another; on plain text that is one pass whose last
    # alternative takes what none of them matches, up to where one would
    re.compile(
        rf"[\r\n]|[^\S\r\n]?[A-Za-z]+|[^\S\r\n]?{_P}+|[0-9]|(?:(?!{_DEEPSEEK_STARTS}).)+",
        re.ASCII | re.DOTALL,
    ),
    re.compile(r"(?=\n)"),  # every line feed is a piece of its own
    _deepseek_anchors,
)


def _space_anchors(raw: Any) -> Any:
    """A space after a character that is neither a space nor "▁" (which the text may spell
    itself, E2 96 81): no piece holds "x▁"."""
    after_meta = np.zeros(len(raw) - 1 if len(raw) else 0, dtype=bool)
    if len(raw) >= 4:  # raw[p-3:p] is "▁" for the pair (p-1, p)
        after_meta[2:] = (raw[:-3] == 0xE2) & (raw[1:-2] == 0x96) & (raw[2:-1] == 0x81)
    return (raw[:-1] != 0x20) & (raw[1:] == 0x20) & ~after_meta


SENTENCEPIECE = Family(
    "sentencepiece",
    # found in " " + text: a run of spaces (a "▁" the text spells is one too), then the rest
    re.compile("[ \u2581]*[^ \u2581]+|[ \u2581]+"),
    re.compile(r"(?!)"),  # every text is cached: no line needs the tokenizer
    lambda left, right, raw: left != left,
    prepend=True,
    raw_anchors=_space_anchors,
)
_SP_NORMALIZER = {
    "type": "Sequence",
    "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
    ],
}


def _sentencepiece(spec: dict[str, Any]) -> Family | None:
    """SENTENCEPIECE when the tokenizer is SentencePiece BPE whose vocabulary never holds "▁"
    after another character (so whole-text BPE splits at every "x▁"), else None."""
    model = spec.get("model") or {}
    if spec.get("pre_tokenizer") is not None or spec.get("normalizer") != _SP_NORMALIZER:
        return None
    if model.get("ignore_merges") or model.get("continuing_subword_prefix"):
        return None  # ignore_merges looks a whole "word" (the whole text) up first
    if model.get("end_of_word_suffix"):
        return None
    vocab = model.get("vocab") or {}
    if not vocab or any("\u2581" in token.lstrip("\u2581") or " " in token for token in vocab):
        return None
    return SENTENCEPIECE


def byte_classes() -> Any:
    """Class of every byte: ASCII letters, digits, punctuation, symbols, whitespace; other
    bytes (non-ASCII, control) are UNKNOWN and never anchor."""
    classes = np.full(256, UNKNOWN, dtype=np.int8)
    for byte in range(33, 127):
        char = chr(byte)
        if char.isalpha():
            classes[byte] = LETTER
        elif char.isdigit():
            classes[byte] = DIGIT
        else:
            classes[byte] = PUNCT if char in _PUNCT else SYMBOL
    for byte in b" \t\n\r\x0b\x0c":
        classes[byte] = WS
    return classes


FAMILIES = {f.name: f for f in (GPT2, DIGITS, QWEN2, LLAMA3, DEEPSEEK, SENTENCEPIECE)}


def family_of(spec: dict[str, Any]) -> Family | None:
    """The family of a tokenizer.json (parsed), or None: its chunk counts are recounted."""
    model = spec.get("model") or {}
    normalizer = spec.get("normalizer")
    if model.get("type") != "BPE" or model.get("dropout") is not None:
        return None
    if model.get("byte_fallback") and normalizer and normalizer.get("type") == "Sequence":
        return _sentencepiece(spec)
    if model.get("byte_fallback") or normalizer not in (None, {"type": "NFC"}):
        return None  # NFC leaves plain text as it is; anything else may not
    pre = spec.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    last = steps[-1] if steps else {}
    if last.get("type") != "ByteLevel" or last.get("add_prefix_space") is not False:
        return None
    with_regex = last.get("use_regex", True)
    splits = [_split_regex(step) for step in steps[:-1]]
    if splits == [] and with_regex:
        return GPT2
    if splits == [r"\p{N}"] and with_regex:
        return DIGITS
    if not with_regex and splits == [QWEN2_REGEX]:
        return QWEN2
    if not with_regex and len(splits) == 1 and splits[0] in LLAMA3_REGEXES:
        return LLAMA3
    if not with_regex and tuple(splits) == DEEPSEEK_SPLITS:
        return DEEPSEEK
    return None


def _split_regex(step: dict[str, Any]) -> str | None:
    """The regex of a Split that isolates its matches (or Digits one by one), else None."""
    if step.get("type") == "Digits" and step.get("individual_digits") is True:
        return r"\p{N}"
    if step.get("type") != "Split" or step.get("behavior") != "Isolated" or step.get("invert"):
        return None
    return (step.get("pattern") or {}).get("Regex")


def family_of_backend(backend: Any) -> Family | None:
    """`family_of` for a tokenizers.Tokenizer (None when it cannot be read)."""
    if backend is None:
        return None
    try:
        return family_of(json.loads(backend.to_str()))
    except (AttributeError, ValueError):
        return None
