"""The sample repository chunked once (shipped tokenizer) for the context tests."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_data" / "repo"


@pytest.fixture(scope="session")
def chunked(tmp_path_factory) -> dict[str, Path]:
    from copilot_cli.chunking import ChunkOptions, chunk_repository

    root = tmp_path_factory.mktemp("context")
    chunk_repository(
        ChunkOptions(
            repos=(SAMPLE,), out=root / "chunks.jsonl", registry=root / "registry.json", jobs=1
        )
    )
    return {"chunks": root / "chunks.jsonl", "registry": root / "registry.json", "root": root}


@pytest.fixture(scope="session")
def session(chunked):
    from copilot_cli.context import open_session

    return open_session(chunked["chunks"], chunked["registry"])
