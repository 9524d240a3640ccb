"""Production tokenizers, rebuilt from llama.cpp's vocab files: golden ids against llama.cpp's
own reference outputs, and chunk's counts exact with each of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from copilot_cli import instruments
from copilot_cli.core.models import load_tokenizer

pytestmark = pytest.mark.real
REPO = Path(__file__).resolve().parents[2]
NAMES = sorted(instruments.TOKENIZERS)


@pytest.fixture(scope="module", params=NAMES)
def named_tokenizer(request):
    return request.param, load_tokenizer(str(instruments.tokenizer_dir(request.param)))


def test_every_reference_text_gives_llama_cpps_ids(named_tokenizer):
    name, tokenizer = named_tokenizer
    cases = instruments.reference_cases(name)
    assert len(cases) >= 40
    for text, ids in cases:
        assert tokenizer(text, add_special_tokens=False).input_ids == ids, (name, text)


@pytest.mark.parametrize("name", NAMES)
def test_the_vocab_gguf_itself_loads_as_the_same_tokenizer(name):
    """`--model`/`--tokenizer` FILE.gguf gives the prepared folder's tokenizer: same ids,
    same fingerprint."""
    from copilot_cli.core.fingerprints import tokenizer_fingerprint

    stem = instruments.TOKENIZERS[name]
    direct = load_tokenizer(str(instruments.root() / "vocab" / f"ggml-vocab-{stem}.gguf"))
    folder = load_tokenizer(str(instruments.tokenizer_dir(name)))
    for text, ids in instruments.reference_cases(name):
        assert direct(text, add_special_tokens=False).input_ids == ids
    assert tokenizer_fingerprint(direct) == tokenizer_fingerprint(folder)


def test_chunk_counts_are_exact_with_every_tokenizer(named_tokenizer, tmp_path):
    """Every chunk's recorded count is what the tokenizer gives its text, and within budget."""
    from copilot_cli.chunking import ChunkOptions, chunk_repository, read_chunks

    name, tokenizer = named_tokenizer
    out = tmp_path / "c.jsonl"
    options = ChunkOptions(
        repos=(REPO / "sample_data" / "repo",), out=out, max_tokens=96, use_cache=False, jobs=1
    )
    chunk_repository(options, tokenizer)
    chunks = read_chunks(out).chunks
    assert len(chunks) > 20
    for chunk in chunks:
        text = chunk.header + chunk.text
        counted = len(tokenizer(text, add_special_tokens=False).input_ids)
        assert counted == chunk.token_count <= 96, (name, chunk.path, chunk.start_line)


def test_every_production_tokenizer_has_a_piece_cache_that_agrees(named_tokenizer):
    """All six families are cached (CodeLlama's SentencePiece included): the piece cache
    gives the tokenizer's own ids on llama.cpp's reference texts (unicode, spaces, digits)."""
    from copilot_cli.chunking.packer import TokenCounter

    name, tokenizer = named_tokenizer
    counter = TokenCounter(tokenizer)
    assert counter.family is not None and counter.pieces is not None, name
    for text, _ in instruments.reference_cases(name):
        truth = tokenizer(text, add_special_tokens=False).input_ids
        assert counter.pieces.encode_any(text) == truth, (name, text)
        assert counter.count(text) == len(truth), (name, text)


def test_reference_files_record_their_source():
    for name in NAMES:
        data = json.loads((instruments.tokenizer_dir(name) / "reference.json").read_text())
        assert data["source"] == f"ggml-vocab-{instruments.TOKENIZERS[name]}.gguf"


def test_remembered_facts_are_the_derived_ones(named_tokenizer):
    """Loaded again from the same files, a production tokenizer's fingerprint and chunk rule
    come from the cache (no backend JSON): the same as derived from its backend JSON."""
    import numpy as np
    from transformers import AutoTokenizer

    from copilot_cli.chunking.rules import chunk_rule
    from copilot_cli.core.fingerprints import tokenizer_fingerprint, tokenizer_source_key

    name, _ = named_tokenizer
    folder = instruments.tokenizer_dir(name)
    plain = AutoTokenizer.from_pretrained(folder)  # not ours: described by its backend JSON
    assert tokenizer_source_key(plain) is None
    assert tokenizer_fingerprint(load_tokenizer(str(folder))) == tokenizer_fingerprint(plain)
    chunk_rule(load_tokenizer(str(folder)))  # remembered
    remembered, derived = chunk_rule(load_tokenizer(str(folder))), chunk_rule(plain)
    assert remembered[0] is derived[0] and remembered[1] == derived[1], name
    if derived[2] is not None:
        assert np.array_equal(remembered[2], derived[2]), name
