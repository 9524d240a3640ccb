"""`copilot-opt serve`: vLLM's OpenAI-compatible server with the connector, through HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests_vllm.conftest import MODEL, generate


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(port: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, f"the server exited with {proc.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise AssertionError("the server did not become healthy")


def test_serve_streams_the_same_output_as_the_offline_engine(prepared, engines, tmp_path):
    from openai import OpenAI

    from copilot_cli.prompts import load_bundle

    prompt = load_bundle(prepared["bundle"]).render(
        "code-completion", language="python", code_before="def mean(xs):\n"
    )
    (offline,) = generate(engines["on"], [prompt], 64)
    port = _free_port()
    exe = Path(sys.executable).parent / "copilot-opt"
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [
            exe,
            "serve",
            str(prepared["kv"]),
            "--model",
            str(MODEL),
            "--port",
            str(port),
            "--",
            "--enforce-eager",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    try:
        _wait_healthy(port, proc)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        stream = client.completions.create(
            model=str(MODEL),
            prompt=prompt,
            max_tokens=64,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        pieces = [choice.text for chunk in stream for choice in chunk.choices]
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=120)
        log.close()
    assert len(pieces) > 1  # streamed, not one reply
    assert "".join(pieces) == offline.outputs[0].text
    assert offline.num_cached_tokens > 0
    assert code == 0, (tmp_path / "serve.log").read_text(errors="replace")[-3000:]
    with socket.socket() as sock:  # the port is free again: the server is gone
        assert sock.connect_ex(("127.0.0.1", port)) != 0
    assert "copilot-opt connector: loaded" in (tmp_path / "serve.log").read_text(errors="replace")


def test_serve_refuses_a_kv_folder_of_another_model_before_starting_vllm(prepared, tmp_path):
    other = tmp_path / "other"
    import shutil

    shutil.copytree(MODEL, other)
    config = (
        (other / "config.json")
        .read_text()
        .replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 1e-05')
    )
    (other / "config.json").write_text(config)
    exe = Path(sys.executable).parent / "copilot-opt"
    proc = subprocess.run(
        [exe, "serve", str(prepared["kv"]), "--model", str(other)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "made for model" in proc.stderr
    # refused before vLLM started: one error line, no engine output at all
    assert len(proc.stderr.strip().splitlines()) == 1 and "vllm" not in proc.stdout.lower()
