"""The completion endpoint (serve --bundle) over real HTTP with the shipped model: llama.cpp
server's /infill as llama.vscode sends it, OpenAI's /v1/completions through the `openai`
client, streaming, and the 4xx answers after which the server goes on serving."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request

import pytest
import torch

from tests.serving.llama_vscode import CODE, CUT, FILE
from tests.serving.llama_vscode import infill_body as _vscode_body
from tests.serving.llama_vscode import post as _post


def _events(data: bytes) -> list[dict]:
    lines = [line for line in data.decode().split("\n\n") if line.startswith("data: ")]
    return [json.loads(line[6:]) for line in lines if line != "data: [DONE]"]


def test_llama_vscode_request_gets_a_completion_with_the_repository_context(server, prepared):
    status, data = _post(server + "/infill", _vscode_body())
    assert status == 200
    answer = json.loads(data)
    assert isinstance(answer["content"], str) and answer["stop"] is True
    assert 0 < len(answer["tokens"]) <= 12
    timings = answer["timings"]
    assert timings["predicted_n"] == len(answer["tokens"])
    assert timings["cache_n"] == answer["tokens_cached"] > 0  # the stored prefix, at least
    snippets = answer["copilot"]["snippets"]
    assert snippets and all(s["path"] != FILE for s in snippets)  # never the edited file
    from copilot_cli.chunking import read_chunks

    known = {c.id for c in read_chunks(prepared["chunks"]).chunks}
    assert {s["id"] for s in snippets} <= known
    assert answer["copilot"]["compose_ms"] > 0


def test_placed_snippets_are_counted_and_exact_prefix_serving_matches_a_full_prefill(endpoint):
    """With chunk KV the snippets' tokens are placed (not computed); with the prefix alone the
    greedy tokens are those of the model computing the whole prompt itself."""
    from copilot_cli.serving.endpoint import Endpoint
    from copilot_cli.serving.protocol import parse
    from copilot_cli.serving.transformers_engine import TransformersEngine

    request = parse("/infill", json.dumps(_vscode_body(n_predict=8, input_extra=[])).encode())
    placed = endpoint.complete(request)
    prefix_tokens = len(endpoint.composer.compose(request, set()).prefix_ids)
    assert placed.cached_tokens > prefix_tokens  # snippets placed beyond the prefix
    assert placed.extra["recomputed_tokens"] > 0  # and some of them recomputed

    engine = endpoint.engine
    exact = TransformersEngine(engine.kv.path, _Loaded(engine.model, engine.tokenizer))
    exact.chunks = set()
    outcome = Endpoint(endpoint.composer, exact).complete(request)
    ids = endpoint.composer.compose(request, set()).ids
    assert outcome.cached_tokens >= prefix_tokens and outcome.extra["recomputed_tokens"] == 0
    assert outcome.tokens == _greedy(engine.model, ids, 8)


class _Loaded:
    def __init__(self, model, tokenizer) -> None:
        self.model, self.tokenizer = model, tokenizer


def _greedy(model, ids: list[int], count: int) -> list[int]:
    out = list(ids)
    with torch.no_grad():
        for _ in range(count):
            out.append(int(model(torch.tensor([out])).logits[0, -1].argmax()))
    return out[len(ids) :]


def test_streamed_events_add_up_to_the_whole_answer(server):
    _, whole = _post(server + "/infill", _vscode_body())
    status, data = _post(server + "/infill", _vscode_body(stream=True))
    assert status == 200
    events = _events(data)
    assert all(e["stop"] is False for e in events[:-1]) and events[-1]["stop"] is True
    text = "".join(e["content"] for e in events)
    assert text == json.loads(whole)["content"]
    assert events[-1]["copilot"]["snippets"] == json.loads(whole)["copilot"]["snippets"]


def test_the_openai_client_completes_and_streams_the_same_text(server):
    import openai

    client = openai.OpenAI(base_url=server + "/v1", api_key="none", max_retries=0)
    (model,) = [m.id for m in client.models.list()]
    extra = {"copilot": {"file": FILE}}
    common = {"model": model, "prompt": CODE[:CUT], "suffix": CODE[CUT : CUT + 200]}
    done = client.completions.create(**common, max_tokens=12, extra_body=extra)
    assert done.choices[0].finish_reason in ("length", "stop")
    assert done.usage.completion_tokens <= 12 and done.usage.prompt_tokens > 100
    streamed = client.completions.create(**common, max_tokens=12, stream=True, extra_body=extra)
    text = "".join(chunk.choices[0].text for chunk in streamed)
    assert text == done.choices[0].text
    _, infill = _post(server + "/infill", _vscode_body(input_extra=[]))
    assert json.loads(infill)["content"] == text  # the same prompt, whatever the protocol


def test_a_context_update_with_n_predict_0_answers_without_predicting(server):
    """llama.vscode's ring-buffer update: empty prefix and suffix, n_predict 0."""
    body = _vscode_body(input_prefix="", input_suffix="", prompt="", n_predict=0, samplers=[])
    body["t_max_predict_ms"] = 1
    status, data = _post(server + "/infill", body)
    answer = json.loads(data)
    assert status == 200 and answer["content"] == "" and answer["tokens"] == []


@pytest.mark.parametrize(
    ("change", "status", "says"),
    [
        ({"input_prefix": None, "prompt": None}, 400, "'input_prefix' is missing"),
        ({"n_predict": -1}, 400, "'n_predict' must be a whole number"),
        ({"input_extra": [{"filename": "a.py"}]}, 400, "'input_extra'[0]"),
        ({"copilot": {"file": "../outside.py"}}, 400, "'copilot.file'"),
        ({"copilot": {"file": "/etc/passwd"}}, 400, "'copilot.file'"),
        ({"copilot": {"file": FILE, "budget": 3}}, 400, "cannot hold one snippet"),
        ({"n_predict": 4000, "copilot": {"file": FILE, "budget": 4000}}, 400, "do not fit"),
        ({"stream": "yes"}, 400, "'stream' must be true or false"),
    ],
)
def test_bad_requests_get_a_4xx_with_one_line_and_the_server_goes_on(server, change, status, says):
    body = {k: v for k, v in {**_vscode_body(n_predict=2), **change}.items() if v is not None}
    code, data = _post(server + "/infill", body)
    assert code == status
    message = json.loads(data)["error"]["message"]
    assert says in message and "\n" not in message and "Traceback" not in message
    assert _post(server + "/infill", _vscode_body(n_predict=2))[0] == 200


def test_malformed_bodies_paths_and_huge_bodies_are_refused(server):
    from copilot_cli.serving.protocol import MAX_BODY

    assert _post(server + "/infill", None, raw=b"{not json")[0] == 400
    assert _post(server + "/infill", None, raw=b"[1, 2]")[0] == 400
    assert _post(server + "/v1/chat/completions", {"messages": []})[0] == 404
    # a huge body is refused from its Content-Length, before it is read
    host, port = server.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.putrequest("POST", "/infill")
    connection.putheader("Content-Length", str(MAX_BODY + 1))
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413 and "over" in json.load(response)["error"]["message"]
    connection.close()
    code, _ = _post(server + "/v1/completions", {"prompt": ["a", "b"], "max_tokens": 1})
    assert code == 400
    with urllib.request.urlopen(server + "/health", timeout=10) as response:
        assert json.load(response) == {"status": "ok"}


def test_concurrent_requests_are_each_answered_in_full(server):
    results: list[tuple[int, bytes]] = []
    bodies = [_vscode_body(n_predict=6), _vscode_body(n_predict=6, stream=True)] * 2

    def send(body) -> None:
        results.append(_post(server + "/infill", body))

    threads = [threading.Thread(target=send, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [code for code, _ in results] == [200] * 4
    texts = set()
    for _, data in results:
        events = _events(data) if data.startswith(b"data: ") else [json.loads(data)]
        texts.add("".join(e["content"] for e in events))
    assert len(texts) == 1  # one request at a time through the engine, the same answer


def test_n_indent_and_stop_strings_cut_as_llama_cpp_server_does(endpoint):
    """A line indented less than n_indent ends the completion before it; nothing that may
    still be cut is streamed early; a stop string ends it where it starts."""
    from copilot_cli.serving.endpoint import _Detokenizer
    from copilot_cli.serving.protocol import CompletionRequest

    tokenizer = endpoint.engine.tokenizer
    text = "x = 1\n        y = 2\n    z = 3\nw = 4\n"
    ids = tokenizer(text, add_special_tokens=False).input_ids

    def run(pause: float = 0.0, **fields) -> tuple[str, str, str]:
        request = CompletionRequest("infill", "", "", **fields)
        cut = _Detokenizer(endpoint.engine.detokenize, request)
        streamed = ""
        for token in ids:
            time.sleep(pause)
            streamed += cut.add(token)
            if cut.stopped:
                break
        return streamed, cut.final(), cut.reason

    assert run(n_indent=8) == ("x = 1\n        y = 2\n",) * 2 + ("length",)
    assert run(n_indent=4)[1] == "x = 1\n        y = 2\n    z = 3\n"
    assert run(stop=("z =",)) == ("x = 1\n        y = 2\n    ",) * 2 + ("stop",)
    assert run()[1] == text
    slow = run(0.005, t_max_predict_ms=1)  # past the time limit the first newline ends it
    assert slow[1].count("\n") <= 1 and slow[2] == "length"


def test_a_template_with_fim_tokens_the_model_lacks_is_refused(prepared, tmp_path):
    from copilot_cli.core.options import OptionError
    from copilot_cli.prompts import CompileOptions, compile_templates
    from copilot_cli.serving.endpoint import open_endpoint
    from copilot_cli.serving.options import EndpointOptions
    from tests.serving.conftest import REPO

    compile_templates(CompileOptions(REPO / "sample_data" / "fim_templates", tmp_path / "fim"))
    options = EndpointOptions(
        kv_dir=prepared["kv"],
        bundle=tmp_path / "fim",
        chunks=prepared["chunks"],
        template="repo-completion",
    )
    with pytest.raises(OptionError, match=r"writes <\|fim_prefix\|>, which is not one of"):
        open_endpoint(options)
