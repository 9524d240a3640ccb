"""vLLM behind the completion endpoint: its OpenAI server (with our connector serving the KV
folder) started as a child process on a private port; each composed request is sent as token
ids, streamed back with its token ids, and the snippets the prompt holds stored are named to
the connector (`kv_transfer_params`) with the cache salt that keeps their approximate KV apart
(serving/vllm_chunks.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from copilot_cli import kv
from copilot_cli.core import lazy
from copilot_cli.core.errors import ArtifactError
from copilot_cli.core.models import load_tokenizer
from copilot_cli.serving.generated import Generated
from copilot_cli.serving.options import ServeOptions

transformers = lazy.module("transformers")
vllm_chunks = lazy.module("copilot_cli.serving.vllm_chunks")
server = lazy.module("copilot_cli.serving.server")

START_TIMEOUT = 600.0  # seconds for vLLM to come up (a CPU build compiles for a while)
# tokens at the end of the placed region vLLM computes itself: measured in
# benchmarks/bench_served_vllm.py (docs/kv.md, "Chunk KV in the engines"); 128 keeps TTFT
# 2.3x over prefix only and lowers KL from 0.034 (placement only) to 0.030
COMPUTE_LAST = 128


@dataclass
class VllmEngine:
    """A running vLLM server and what requests need of it."""

    process: Any
    url: str
    tokenizer: Any
    model_name: str
    chunks: set[str]
    context_length: int
    compute_last: int = COMPUTE_LAST
    name = "vllm"
    stored_run_only = True  # the connector places one stored run from position 0

    @classmethod
    def start(cls, options: Any, extra_args: tuple[str, ...] = ()) -> VllmEngine:
        """vLLM's server on a free local port with the connector, once it answers /health.

        Raises:
            ArtifactError: the server did not come up (its log is on stderr).
        """
        port = _free_port()
        # the usage of each answer says how many prompt tokens were not computed
        extra = ("--enable-prompt-tokens-details", *extra_args)
        serve = ServeOptions(
            kv_dir=options.kv_dir, model=options.model, port=port, extra_args=extra
        )
        model_dir, dtype = server.check(serve)
        _check_movable(options.kv_dir, model_dir)
        env = {
            **os.environ,
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        }
        process = subprocess.Popen(
            server.command(serve, model_dir, dtype), env=env, stdout=subprocess.DEVNULL
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ArtifactError(
                    f"vLLM exited ({process.returncode}) before serving", where=model_dir
                )
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    break
            except OSError:
                time.sleep(1)
        else:
            process.kill()
            raise ArtifactError("vLLM did not come up in time", where=model_dir)
        stored = kv.KVCacheDir(options.kv_dir)
        chunks = {n for n, e in stored.index.prefixes.items() if e.kind == "chunk"}
        with urllib.request.urlopen(url + "/v1/models", timeout=10) as response:
            card = json.load(response)["data"][0]
        length = int(card.get("max_model_len") or 0)
        return cls(process, url, load_tokenizer(model_dir), card["id"], chunks, length)

    def stored_chunks(self) -> set[str]:
        return set(self.chunks)

    def detokenize(self, tokens: list[int]) -> bytes:
        return self.tokenizer.decode(tokens).encode("utf-8")

    def generate(
        self, composed: Any, max_tokens: int, on_token: Callable[[int], bool] | None = None
    ) -> Generated:
        placed = [[s.stored, s.start] for s in composed.segments() if s.stored in self.chunks]
        body: dict[str, Any] = {
            "model": self.model_name,
            "prompt": composed.ids,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
            "return_token_ids": True,
            "stream_options": {"include_usage": True},
        }
        if placed:
            body["cache_salt"] = vllm_chunks.SALT
            body["kv_transfer_params"] = {
                vllm_chunks.CHUNKS_KEY: placed,
                vllm_chunks.COMPUTE_LAST_KEY: self.compute_last,
            }
        return self._stream(body, len(composed.ids), on_token)

    def _stream(self, body: dict[str, Any], prompt: int, on_token: Any) -> Generated:
        request = urllib.request.Request(
            self.url + "/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        started = time.perf_counter()
        first, tokens, reason, cached = 0.0, [], "length", 0
        with urllib.request.urlopen(request) as response:
            for raw in response:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                usage = chunk.get("usage") or {}
                details = usage.get("prompt_tokens_details") or {}
                cached = details.get("cached_tokens") or cached
                for choice in chunk.get("choices", []):
                    for token in choice.get("token_ids") or []:
                        first = first or time.perf_counter()
                        tokens.append(int(token))
                        if on_token is not None and on_token(int(token)) is False:
                            reason = "stop"  # a stop string: closing the stream ends it
                            break
                    if choice.get("finish_reason") == "stop":
                        reason = "stop"
                if reason == "stop" and tokens and on_token is not None and chunk.get("choices"):
                    break
        done = time.perf_counter()
        first = first or done
        return Generated(
            tokens=tokens,
            finish_reason=reason,
            prompt_tokens=prompt,
            cached_tokens=int(cached),
            recomputed_tokens=0,
            prompt_ms=(first - started) * 1000,
            predicted_ms=(done - first) * 1000,
        )

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _check_movable(kv_dir: Any, model_dir: str) -> None:
    """One line before vLLM starts when the folder holds chunk KV for a model whose keys
    cannot be moved (the connector would stop the engine for the same reason)."""
    if any(e.kind == "chunk" for e in kv.KVCacheDir(kv_dir).index.prefixes.values()):
        kv.rotary_of_config(transformers.AutoConfig.from_pretrained(model_dir))
