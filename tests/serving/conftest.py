"""The endpoint's fixtures: the shipped templates, the sample repository's chunks and chunk KV
for the shipped model, and an endpoint serving them over real HTTP (transformers engine)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_data" / "repo"


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from copilot_cli import CompileOptions, PrefillOptions, compile_templates, prefill_kv
    from copilot_cli.chunking import ChunkOptions, chunk_repository
    from copilot_cli.core.models import default_model, load_tokenizer

    root = tmp_path_factory.mktemp("endpoint")
    chunks, registry = root / "repo.jsonl", root / "repo.registry.json"
    options = ChunkOptions(repos=(SAMPLE,), out=chunks, registry=registry, use_cache=False, jobs=1)
    chunk_repository(options, load_tokenizer(default_model()))
    compile_templates(CompileOptions(REPO / "templates", root / "bundle"))
    prefill_kv(PrefillOptions(out=root / "kv", bundle=root / "bundle", chunks=chunks))
    return {"chunks": chunks, "registry": registry, "bundle": root / "bundle", "kv": root / "kv"}


@pytest.fixture(scope="session")
def endpoint(prepared):
    from copilot_cli.serving.endpoint import open_endpoint
    from copilot_cli.serving.options import EndpointOptions

    options = EndpointOptions(
        kv_dir=prepared["kv"],
        bundle=prepared["bundle"],
        chunks=prepared["chunks"],
        registry=prepared["registry"],
        budget=600,
    )
    return open_endpoint(options)


@pytest.fixture(scope="session")
def server(endpoint) -> Iterator[str]:
    """The endpoint on a free local port: its base URL."""
    from copilot_cli.serving.endpoint import make_server

    http = make_server(endpoint, "127.0.0.1", 0)
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{http.server_address[1]}"
    http.shutdown()
    http.server_close()
