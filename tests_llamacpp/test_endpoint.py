"""The completion endpoint with llama.cpp as its engine, as a user runs it: the sample
repository chunked with SmolLM2's GGUF tokenizer, the templates compiled for it, prefix and
snippet slots written by `prefill-kv --engine llama.cpp --chunks`, then `copilot-opt serve
--bundle ... --engine llama.cpp` as its own process on a local port, spoken to as llama.vscode
speaks (/infill) and with the `openai` client (/v1/completions). Needs `make llamacpp-env` and
`make real-models` (make test-llamacpp does both)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.serving.llama_vscode import CODE, CUT, FILE, infill_body
from tests.serving.llama_vscode import post as _post

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> None:
    command = [str(Path(sys.executable).parent / "copilot-opt"), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict[str, Path]:
    from copilot_cli import instruments

    gguf = instruments.root() / instruments.SMOLLM2_GGUF
    if not gguf.is_file():
        pytest.skip(f"no SmolLM2 GGUF in {instruments.root()} (make real-models)")
    root = tmp_path_factory.mktemp("endpoint")
    chunks, registry = root / "repo.jsonl", root / "repo.registry.json"
    sample = REPO / "sample_data" / "repo"
    _cli("chunk", str(sample), "-o", str(chunks), "--registry", str(registry), "-m", str(gguf),
         "--include", "src/kvstore/*.py", "--no-cache")  # fmt: skip
    _cli("compile-templates", str(REPO / "templates"), "-o", str(root / "bundle"), "-m", str(gguf))
    _cli("prefill-kv", str(root / "bundle"), "--engine", "llama.cpp", "-m", str(gguf),
         "--chunks", str(chunks), "-o", str(root / "slots"))  # fmt: skip
    return {"gguf": gguf, "chunks": chunks, "registry": registry, "root": root}


@pytest.fixture(scope="module")
def server(prepared):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    root = prepared["root"]
    command = [
        str(Path(sys.executable).parent / "copilot-opt"), "serve", str(root / "slots"),
        "--bundle", str(root / "bundle"), "--chunks", str(prepared["chunks"]),
        "--registry", str(prepared["registry"]), "--engine", "llama.cpp",
        "-m", str(prepared["gguf"]), "--port", str(port), "--budget", "900",
    ]  # fmt: skip
    log = (root / "serve.log").open("w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, (root / "serve.log").read_text()[-2000:]
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                break
        except OSError:
            time.sleep(0.5)
    yield {"url": url, "process": process, "log": root / "serve.log"}
    if process.poll() is None:
        process.kill()
    log.close()


def _body(**changes) -> dict:
    extra = [{"text": "RETRIES = 3\n", "time": 1733500000, "filename": "cfg.py"}]
    return infill_body(**{"input_extra": extra, "n_predict": 16, **changes})


def test_llama_vscode_request_is_served_with_the_prefix_slot_and_placed_snippets(server):
    status, data = _post(server["url"] + "/infill", _body())
    assert status == 200, data
    answer = json.loads(data)
    snippets = answer["copilot"]["snippets"]
    assert snippets and all(s["path"] != FILE for s in snippets)
    assert 0 < len(answer["tokens"]) <= 16 and answer["content"]
    # restored and placed tokens were not computed: more than the template's prefix
    assert answer["tokens_cached"] > 300
    assert answer["copilot"]["recomputed_tokens"] > 0  # the first/last tokens of each snippet
    assert answer["timings"]["prompt_n"] + answer["tokens_cached"] > answer["tokens_cached"]


def test_streaming_and_the_openai_client_give_the_same_text(server):
    import openai

    _, whole = _post(server["url"] + "/infill", _body(input_extra=[]))
    text = json.loads(whole)["content"]
    status, data = _post(server["url"] + "/infill", _body(input_extra=[], stream=True))
    assert status == 200
    events = [json.loads(chunk[6:]) for chunk in data.decode().split("\n\n") if chunk]
    assert "".join(e["content"] for e in events) == text and events[-1]["stop"] is True
    client = openai.OpenAI(base_url=server["url"] + "/v1", api_key="none", max_retries=0)
    done = client.completions.create(
        model="smollm2", prompt=CODE[:CUT], suffix=CODE[CUT : CUT + 200], max_tokens=16,
        extra_body={"copilot": {"file": FILE}},
    )  # fmt: skip
    assert done.choices[0].text == text


def test_a_bad_request_is_a_4xx_and_the_server_goes_on(server):
    code, data = _post(server["url"] + "/infill", _body(copilot={"file": "../../etc/passwd"}))
    assert code == 400 and "'copilot.file'" in json.loads(data)["error"]["message"]
    code, data = _post(server["url"] + "/infill", _body(n_predict=4000))
    assert code == 400 and "do not fit" in json.loads(data)["error"]["message"]
    assert _post(server["url"] + "/infill", _body(n_predict=2))[0] == 200


def test_ctrl_c_stops_the_server_cleanly(server):
    server["process"].send_signal(signal.SIGINT)
    assert server["process"].wait(timeout=30) == 0
    assert "Traceback" not in server["log"].read_text()
