from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from copilot_cli.chunking import ChunkOptions, chunk_repository
from copilot_cli.chunking.packer import TokenCounter
from copilot_cli.core.models import SHIPPED_MODEL

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_data" / "repo"


@pytest.fixture(scope="session")
def tokenizer():
    return AutoTokenizer.from_pretrained(SHIPPED_MODEL)


# every character class the pre-tokenizer distinguishes, the apostrophe of contractions,
# whitespace runs and multi-byte characters
ALPHABET = list("abcXYZ_019'\"()[]{}.,:;=+-*/#@\\") + [" ", "  ", "\t", "\n", "\n\n", "    "]
ALPHABET += ["é", "中", "🙂", "'s", "'ll", "\r\n", "\u00a0"]


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


def _sentencepiece(split_by_whitespace: bool = True) -> PreTrainedTokenizerFast:
    """A SentencePiece-style BPE as CodeLlama's tokenizer.json has it (Prepend "▁" + Replace
    " " -> "▁", no pre-tokenizer, byte fallback), trained here on the sample repository with
    words cut at "▁" (SentencePiece's split_by_whitespace); without it, a vocabulary entry
    holding "x▁" is added (the rule must then refuse the family)."""
    corpus = [p.read_text(errors="replace") for p in sorted(SAMPLE.rglob("*.py"))]
    trainer_side = Tokenizer(models.BPE())
    trainer_side.normalizer = normalizers.Replace(" ", "\u2581")
    trainer_side.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")
    trainer = trainers.BpeTrainer(vocab_size=700, show_progress=False)
    trainer_side.train_from_iterator(corpus, trainer)
    spec = json.loads(trainer_side.to_str())
    vocab = spec["model"]["vocab"]
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    if not split_by_whitespace:
        vocab["e\u2581"] = len(vocab)
        spec["model"]["merges"].append(["e", "\u2581"])
    spec["model"]["byte_fallback"] = True
    spec["normalizer"] = {
        "type": "Sequence",
        "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        ],
    }
    spec["pre_tokenizer"] = None
    spec["decoder"] = None
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)))


@pytest.fixture(scope="session")
def sentencepiece_tokenizer():
    return _sentencepiece()


@pytest.fixture(scope="session")
def trained_tokenizer():
    return _trained_byte_level()


@pytest.fixture(scope="session")
def qwen_style_tokenizer(tokenizer):
    return _qwen_style(tokenizer)


@pytest.fixture(scope="session")
def counter(tokenizer):
    return TokenCounter(tokenizer)


@pytest.fixture(scope="session")
def recount(tokenizer):
    """The judge: a count by the tokenizer itself, none of the chunker's shortcuts."""
    return lambda text: len(tokenizer(text, add_special_tokens=False).input_ids)


def run(repo: Path, out: Path, tokenizer, **kw):
    kw.setdefault("use_cache", False)
    kw.setdefault("jobs", 1)
    result = chunk_repository(ChunkOptions(repos=(repo,), out=out, **kw), tokenizer)
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return result, lines[0], lines[1:]


def reassemble(chunks: list[dict]) -> dict[str, list[tuple[int, int, str]]]:
    """path -> sorted (start_byte, end_byte, text) from every chunk location."""
    files: dict[str, list[tuple[int, int, str]]] = {}
    for chunk in chunks:
        for loc in chunk["locations"]:
            files.setdefault(loc["path"], []).append(
                (loc["start_byte"], loc["end_byte"], chunk["text"])
            )
    return {path: sorted(parts) for path, parts in files.items()}
