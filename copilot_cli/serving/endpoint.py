"""The completion endpoint editors talk to: llama.cpp server's POST /infill (llama.vscode,
llama.vim) and OpenAI's POST /v1/completions, answered with repository context chosen for each
request and the prepared KV (static prefix, snippets) in the engine behind it.

One request: parse (serving/protocol.py; a bad one is a 4xx with one line, and the server goes
on), compose (serving/compose.py: context, template, pieces), generate (the engine: llama.cpp,
transformers or vLLM), answer or stream (server-sent events: llama.cpp's `{content, stop}`
events, or OpenAI's chunks and `[DONE]`). Every answer carries `copilot`: the snippets used,
the tokens not computed (restored or placed) and the time the endpoint itself took.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from copilot_cli.core.errors import CopilotError
from copilot_cli.serving import protocol
from copilot_cli.serving.protocol import CompletionRequest, Outcome, RequestError


@dataclass
class Endpoint:
    """The request path: a Composer (context + template) and an engine."""

    composer: Any
    engine: Any
    model_name: str = "copilot-opt"

    def complete(
        self, request: CompletionRequest, emit: Callable[[str, int], None] | None = None
    ) -> Outcome:
        """Compose and generate one request; `emit(text, token)` gets each piece of text as
        it is decoded (streaming)."""
        started = time.perf_counter()
        composed = self.composer.compose(
            request,
            self.engine.stored_chunks(),
            stored_first=getattr(self.engine, "stored_run_only", False),
        )
        composed_at = time.perf_counter()
        text = _Detokenizer(self.engine.detokenize, request.stop)

        def on_token(token: int) -> bool:
            piece = text.add(token)
            if piece and emit is not None:
                emit(piece, token)
            return not text.stopped

        try:
            generated = self.engine.generate(composed, request.max_tokens, on_token)
        except CopilotError as exc:
            status = 400 if exc.where in ("n_predict", "budget") else 500
            raise RequestError(status, str(exc)) from None
        snippets = composed.snippets
        return Outcome(
            text=text.final(),
            tokens=generated.tokens,
            finish_reason="stop" if text.stopped else generated.finish_reason,
            prompt_tokens=generated.prompt_tokens,
            cached_tokens=generated.cached_tokens,
            prompt_ms=generated.prompt_ms + (composed_at - started) * 1000,
            predicted_ms=generated.predicted_ms,
            snippets=snippets,
            model=self.model_name,
            extra={
                "compose_ms": round((composed_at - started) * 1000, 3),
                "recomputed_tokens": generated.recomputed_tokens,
                **({"note": generated.note} if generated.note else {}),
            },
        )


class _Detokenizer:
    """Text as tokens come: only whole UTF-8 characters are handed out; stop strings end it."""

    def __init__(self, detokenize: Callable[[list[int]], bytes], stops: tuple[str, ...]) -> None:
        self.detokenize = detokenize
        self.stops = stops
        self.tokens: list[int] = []
        self.sent = 0
        self.stopped = False

    def _text(self) -> str:
        data = self.detokenize(self.tokens)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:  # a character cut at the end: wait for the rest
            return data[: exc.start].decode("utf-8", errors="replace")

    def add(self, token: int) -> str:
        self.tokens.append(token)
        text = self._text()
        for stop in self.stops:
            at = text.find(stop)
            if at >= 0:
                text, self.stopped = text[:at], True
        piece = text[self.sent :]
        self.sent = len(text)
        return piece

    def final(self) -> str:
        text = self.detokenize(self.tokens).decode("utf-8", errors="replace")
        for stop in self.stops:
            at = text.find(stop)
            if at >= 0:
                text = text[:at]
        return text


class _Handler(BaseHTTPRequestHandler):
    """One HTTP exchange; the endpoint is the server's (`_Server.endpoint`)."""

    server_version = "copilot-opt"
    server: _Server

    def do_GET(self) -> None:
        endpoint = self.server.endpoint
        if self.path in ("/health", "/v1/health"):
            self._json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            models = [{"id": endpoint.model_name, "object": "model"}]
            self._json(200, {"object": "list", "data": models})
        else:
            self._json(404, {"error": {"code": 404, "message": "not found"}})

    def do_POST(self) -> None:
        try:
            request = protocol.parse(self.path, self._body())
            if request.stream:
                self._stream(request)
            else:
                outcome = self.server.endpoint.complete(request)
                self._json(200, protocol.answer(request, outcome))
        except RequestError as exc:
            self._json(exc.status, protocol.error_body(self.path, exc))

    def _body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise RequestError(411, "a request body needs a Content-Length")
        if int(length) > protocol.MAX_BODY:
            raise RequestError(413, f"the request body is over {protocol.MAX_BODY:,} bytes")
        return self.rfile.read(int(length))

    def _stream(self, request: CompletionRequest) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()

        def emit(text: str, token: int) -> None:
            self.wfile.write(protocol.stream_event(request, text, token))
            self.wfile.flush()

        try:
            outcome = self.server.endpoint.complete(request, emit)
        except RequestError as exc:  # headers are sent: the error is the last event
            body = protocol.error_body(self.path, exc)
            self.wfile.write(b"data: " + json.dumps(body).encode() + b"\n\n")
            return
        self.wfile.write(protocol.stream_end(request, outcome))
        self.wfile.flush()

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        return


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    endpoint: Endpoint


def make_server(endpoint: Endpoint, host: str, port: int) -> ThreadingHTTPServer:
    """An HTTP server for `endpoint` (call `serve_forever`); engines serialize their own work."""
    server = _Server((host, port), _Handler)
    server.endpoint = endpoint
    return server


ENDPOINT_ENGINES = ("transformers", "llama.cpp", "vllm")


@dataclass(frozen=True)
class EndpointOptions:
    """Settings of the completion endpoint (`serve --bundle`).

    Attributes:
        kv_dir: the prepared KV: a prefill-kv folder (transformers, vLLM) or a slot folder
            of prefill-kv --engine llama.cpp.
        bundle, template: the compiled templates and the one a request is rendered with.
        chunks, registry: the repository's chunks file and registry (loaded once).
        engine: transformers, llama.cpp or vllm.
        model: the model folder, or the GGUF file for llama.cpp.
        budget: tokens of repository context per request (a request may ask for fewer).
        host, port: where it listens.
    """

    kv_dir: Path
    bundle: Path
    chunks: Path
    registry: Path | None = None
    template: str = "code-completion"
    engine: str = "transformers"
    model: str = ""
    budget: int = 1024
    host: str = "127.0.0.1"
    port: int = 8012

    def __post_init__(self) -> None:
        from copilot_cli.core.options import coerce_paths, require, require_count

        coerce_paths(self)
        require(
            self.engine in ENDPOINT_ENGINES, "engine", f"use one of {', '.join(ENDPOINT_ENGINES)}"
        )
        require(self.kv_dir.is_dir(), "kv_dir", f"{self.kv_dir} is not a folder")
        require(self.bundle.is_dir(), "bundle", f"{self.bundle} is not a bundle folder")
        require(self.chunks.is_file(), "chunks", f"{self.chunks} is not a file")
        require_count(self.budget, "budget", low=1, high=1 << 16)
        require_count(self.port, "port", low=1, high=65535)


def open_endpoint(options: EndpointOptions) -> Endpoint:
    """The engine started (its KV checked against the model), the chunks and index loaded,
    the bundle and template checked: what every request then uses."""
    from copilot_cli.context import open_session
    from copilot_cli.prompts import load_bundle
    from copilot_cli.serving.compose import Composer

    engine, tokenizer, name = _engine(options)
    bundle = load_bundle(options.bundle)
    bundle.entry(options.template)  # a template that is not there: one line now
    session = open_session(options.chunks, options.registry, tokenizer)
    composer = Composer(session, bundle, options.template, options.chunks, options.budget)
    return Endpoint(composer, engine, name)


def _engine(options: EndpointOptions) -> tuple[Any, Any, str]:
    """(engine, the tokenizer requests are composed with, the model's name)."""
    if options.engine == "llama.cpp":
        from copilot_cli.core.gguf import load_gguf_tokenizer
        from copilot_cli.serving.engines import load_llamacpp, require_gguf

        gguf = require_gguf(options.model)
        load_llamacpp()  # one line when llama-cpp-python is not installed here
        from copilot_cli.serving.llamacpp_context import ContextEngine

        return ContextEngine(options.kv_dir, gguf), load_gguf_tokenizer(gguf), gguf.name
    if options.engine == "vllm":
        from copilot_cli.serving.vllm_engine import VllmEngine

        engine = VllmEngine.start(options)
        return engine, engine.tokenizer, engine.model_name
    from copilot_cli.core.models import ModelSpec, load_model
    from copilot_cli.serving.transformers_engine import TransformersEngine

    loaded = load_model(ModelSpec(options.model) if options.model else ModelSpec())
    return TransformersEngine(options.kv_dir, loaded), loaded.tokenizer, str(loaded.source)


def serve_endpoint(flags: dict[str, Any]) -> None:
    """`serve --bundle ...`: the endpoint in the foreground until Ctrl-C."""
    if flags.get("chunks") is None:
        from copilot_cli.core.options import OptionError

        raise OptionError(
            "chunks", "the endpoint chooses context from a chunks file: give --chunks"
        )
    fields = ("kv_dir", "bundle", "chunks", "registry", "template", "engine", "model", "budget")
    options = EndpointOptions(
        **{k: flags[k] for k in fields}, host=flags["host"], port=flags["port"]
    )
    endpoint = open_endpoint(options)
    server = make_server(endpoint, options.host, options.port)
    print(
        f"serving {options.template} with {options.engine} ({endpoint.model_name}) on "
        f"http://{options.host}:{options.port} (POST /infill, /v1/completions)",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
