from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from copilot_cli.chunking import ChunkOptions, chunk_repository
from copilot_cli.chunking.packer import TokenCounter
from copilot_cli.core.models import SHIPPED_MODEL

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_data" / "repo"


@pytest.fixture(scope="session")
def tokenizer():
    return AutoTokenizer.from_pretrained(SHIPPED_MODEL)


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
