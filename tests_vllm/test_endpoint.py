"""The completion endpoint with vLLM as its engine: vLLM's OpenAI server runs as its own process
with our connector; the endpoint (chunks and index loaded once) composes each editor request,
sends it as token ids with its stored snippets named, and the connector places their KV after
the stored prefix, under a cache salt. Spoken to over real HTTP as llama.vscode speaks (/infill)
and with the `openai` client."""

from __future__ import annotations

import json
import threading

import pytest

from tests.serving.llama_vscode import CODE, CUT, FILE, infill_body, post
from tests_vllm.conftest import MODEL, REPO


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    from copilot_cli import CompileOptions, PrefillOptions, compile_templates, prefill_kv
    from copilot_cli.chunking import ChunkOptions, chunk_repository
    from copilot_cli.core.models import load_tokenizer
    from copilot_cli.serving.endpoint import make_server, open_endpoint
    from copilot_cli.serving.options import EndpointOptions

    root = tmp_path_factory.mktemp("endpoint")
    chunks, registry = root / "repo.jsonl", root / "repo.registry.json"
    chunk_repository(
        ChunkOptions(repos=(REPO / "sample_data" / "repo",), out=chunks, registry=registry,
                     use_cache=False, jobs=1),
        load_tokenizer(str(MODEL)),
    )  # fmt: skip
    compile_templates(CompileOptions(REPO / "templates", root / "bundle"))
    prefill_kv(PrefillOptions(out=root / "kv", bundle=root / "bundle", chunks=chunks))
    options = EndpointOptions(
        kv_dir=root / "kv", bundle=root / "bundle", chunks=chunks, registry=registry,
        engine="vllm", model=str(MODEL), budget=600, extra_args=("--enforce-eager",),
    )  # fmt: skip
    served = open_endpoint(options)
    server = make_server(served, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {"endpoint": served, "url": f"http://127.0.0.1:{server.server_address[1]}"}
    server.shutdown()
    server.server_close()
    served.engine.close()


def _body(**changes) -> dict:
    return infill_body(**{"input_extra": [], **changes})


def _post(url: str, body: dict) -> tuple[int, dict]:
    status, data = post(url, body)
    return status, json.loads(data)


def test_snippets_are_placed_by_the_connector_and_only_under_the_salt(endpoint):
    served = endpoint["endpoint"]
    status, answer = _post(endpoint["url"] + "/infill", _body())
    assert status == 200, answer
    snippets = answer["copilot"]["snippets"]
    assert snippets and all(s["path"] != FILE for s in snippets)
    from copilot_cli.serving.protocol import parse

    composed = served.composer.compose(
        parse("/infill", json.dumps(_body()).encode()),
        served.engine.stored_chunks(),
        stored_first=True,
    )
    prefix = len(composed.prefix_ids)
    assert answer["tokens_cached"] > prefix  # placed snippets beyond the stored prefix
    # the same token ids sent to vLLM without the salt: no block of the placed (approximate)
    # KV answers them, whatever vLLM's own prefix cache holds
    plain = {"model": served.engine.model_name, "prompt": composed.ids, "max_tokens": 1}
    _, direct = _post(served.engine.url + "/v1/completions", plain)
    cached = (direct["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    first_snippet = min(s.start for s in composed.segments() if s.stored)
    assert cached <= first_snippet < answer["tokens_cached"]


def test_the_openai_client_and_streaming_give_the_infill_text(endpoint):
    import openai

    _, whole = _post(endpoint["url"] + "/infill", _body())
    client = openai.OpenAI(base_url=endpoint["url"] + "/v1", api_key="none", max_retries=0)
    done = client.completions.create(
        model="tiny", prompt=CODE[:CUT], suffix=CODE[CUT : CUT + 200], max_tokens=12,
        extra_body={"copilot": {"file": FILE}},
    )  # fmt: skip
    assert done.choices[0].text == whole["content"]
    streamed = client.completions.create(
        model="tiny", prompt=CODE[:CUT], suffix=CODE[CUT : CUT + 200], max_tokens=12,
        stream=True, extra_body={"copilot": {"file": FILE}},
    )  # fmt: skip
    assert "".join(chunk.choices[0].text for chunk in streamed) == whole["content"]


def test_bad_requests_are_4xx_and_the_server_goes_on(endpoint):
    status, answer = _post(endpoint["url"] + "/infill", _body(copilot={"file": "/etc/passwd"}))
    assert status == 400 and "'copilot.file'" in answer["error"]["message"]
    status, answer = _post(endpoint["url"] + "/infill", _body(n_predict=4000))
    assert status == 400 and "do not fit" in answer["error"]["message"]
    assert _post(endpoint["url"] + "/infill", _body(n_predict=2))[0] == 200
