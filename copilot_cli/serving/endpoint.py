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
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from copilot_cli.context import open_session
from copilot_cli.core import lazy
from copilot_cli.core.errors import CopilotError
from copilot_cli.core.gguf import load_gguf_tokenizer
from copilot_cli.core.models import ModelSpec, load_model
from copilot_cli.core.options import OptionError
from copilot_cli.kv import require_gguf
from copilot_cli.prompts import load_bundle
from copilot_cli.serving import protocol
from copilot_cli.serving.compose import Composer
from copilot_cli.serving.engines import load_llamacpp
from copilot_cli.serving.generated import Generated
from copilot_cli.serving.options import EndpointOptions
from copilot_cli.serving.protocol import CompletionRequest, Outcome, RequestError
from copilot_cli.serving.vllm_engine import VllmEngine

transformers_engine = lazy.module("copilot_cli.serving.transformers_engine")
llamacpp_context = lazy.module("copilot_cli.serving.llamacpp_context")

log = logging.getLogger(__name__)


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
        _check_fits(len(composed.ids), request.max_tokens, self.engine.context_length)
        if request.max_tokens == 0:  # llama.vscode's context update: nothing to predict
            return self._outcome(composed, None, "", "length", started, composed_at)
        text = _Detokenizer(self.engine.detokenize, request)

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
        final = text.final()
        if emit is not None and final[text.sent :]:  # what was held back for a cut that
            emit(final[text.sent :], generated.tokens[-1])  # never came
        reason = text.reason or generated.finish_reason
        return self._outcome(composed, generated, final, reason, started, composed_at)

    def _outcome(
        self, composed: Any, generated: Any, text: str, reason: str, started: float, at: float
    ) -> Outcome:
        compose_ms = (at - started) * 1000
        if generated is None:
            generated = Generated([], "length", len(composed.ids), 0, 0, 0.0, 0.0)
        return Outcome(
            text=text,
            tokens=generated.tokens,
            finish_reason=reason,
            prompt_tokens=generated.prompt_tokens,
            cached_tokens=generated.cached_tokens,
            prompt_ms=generated.prompt_ms + compose_ms,
            predicted_ms=generated.predicted_ms,
            snippets=composed.snippets,
            model=self.model_name,
            extra={
                "compose_ms": round(compose_ms, 3),
                "recomputed_tokens": generated.recomputed_tokens,
                **({"note": generated.note} if generated.note else {}),
            },
        )


class _Detokenizer:
    """Text as tokens come: only whole UTF-8 characters are handed out, and nothing that may
    still turn out to be cut (the start of a stop string, a new line's indentation under
    `n_indent`). A completion ends at a stop string, at a line indented less than `n_indent`
    (cut before it) or, past `t_max_predict_ms`, once it holds a newline (llama.cpp server's
    rules for /infill)."""

    def __init__(self, detokenize: Callable[[list[int]], bytes], request: CompletionRequest):
        self.detokenize = detokenize
        self.stops = request.stop
        self.n_indent = request.n_indent
        self.deadline = request.t_max_predict_ms / 1000 if request.t_max_predict_ms else None
        self.started = 0.0  # the first token's time: the limit counts from there
        self.tokens: list[int] = []
        self.sent = 0
        self.stopped = False
        self.reason = ""  # "stop" (a stop string) or "length" (an indentation or time limit)

    def _text(self) -> str:
        data = self.detokenize(self.tokens)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:  # a character cut at the end: wait for the rest
            return data[: exc.start].decode("utf-8", errors="replace")

    def _cut(self, text: str) -> tuple[str, str]:
        """(the text up to where the completion ends, why it ends there or "")."""
        end, reason = len(text), ""
        for stop in self.stops:
            at = text.find(stop)
            if 0 <= at < end:
                end, reason = at, "stop"
        if self.n_indent:
            at = _under_indented(text[:end], self.n_indent)
            if at is not None:
                end, reason = at, "length"
        return text[:end], reason

    def _held(self, text: str) -> int:
        """Characters at the end that a later token may still cut."""
        held = 0
        for stop in self.stops:
            held = max(held, next((k for k in range(len(stop) - 1, 0, -1)
                                   if text.endswith(stop[:k])), 0))  # fmt: skip
        line = text.rpartition("\n")[2]
        if self.n_indent and "\n" in text and not line.strip():
            held = max(held, len(line))
        return held

    def add(self, token: int) -> str:
        self.tokens.append(token)
        self.started = self.started or time.perf_counter()
        text, reason = self._cut(self._text())
        late = self.deadline is not None and time.perf_counter() - self.started > self.deadline
        if not reason and late and "\n" in text:
            reason = "length"
        self.stopped, self.reason = bool(reason), reason
        safe = len(text) if self.stopped else len(text) - self._held(text)
        piece = text[self.sent : safe]
        self.sent = max(self.sent, safe)
        return piece

    def final(self) -> str:
        return self._cut(self.detokenize(self.tokens).decode("utf-8", errors="replace"))[0]


def _check_fits(prompt: int, predict: int, context: int) -> None:
    if prompt + predict > context:
        raise RequestError(
            400,
            f"the prompt ({prompt} tokens) and n_predict ({predict}) do not fit the model's "
            f"context ({context} tokens): ask for a smaller copilot.budget or n_predict",
        )


def _under_indented(text: str, n_indent: int) -> int | None:
    """Where the first line after a newline indented less than `n_indent` starts (a line
    counts once it holds more than whitespace), or None."""
    offset = text.find("\n") + 1
    while offset:
        line = text[offset:].split("\n", 1)[0]
        if line.strip() and len(line) - len(line.lstrip(" \t")) < n_indent:
            return offset
        offset = text.find("\n", offset) + 1
    return None


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
        except Exception as exc:  # an engine failure: one line to the client, the server goes on
            log.warning("request failed: %s", _one_line(exc))
            error = RequestError(500, f"the engine failed: {_one_line(exc)}")
            self._json(500, protocol.error_body(self.path, error))

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
        except Exception as exc:  # headers are sent: the error is the last event
            error = exc if isinstance(exc, RequestError) else RequestError(500, _one_line(exc))
            body = protocol.error_body(self.path, error)
            self.wfile.write(b"data: " + json.dumps(body).encode() + b"\n\n")
            return
        self.wfile.write(protocol.stream_end(request, outcome))
        self.wfile.flush()

    def _json(self, status: int, body: dict[str, Any]) -> None:
        protocol.send_json(self, status, body)

    def log_message(self, *args: Any) -> None:
        return


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    endpoint: Endpoint


def make_server(endpoint: Endpoint, host: str, port: int) -> ThreadingHTTPServer:
    """An HTTP server for `endpoint` (call `serve_forever`); engines serialize their own work."""
    server = _Server((host, port), _Handler)
    server.endpoint = endpoint
    return server


def open_endpoint(options: EndpointOptions) -> Endpoint:
    """The engine started (its KV checked against the model), the chunks and index loaded,
    the bundle and template checked: what every request then uses."""

    engine, tokenizer, name = _engine(options)
    bundle = load_bundle(options.bundle)
    bundle.entry(options.template)  # a template that is not there: one line now
    session = open_session(options.chunks, options.registry, tokenizer)
    composer = Composer(session, bundle, options.template, options.chunks, options.budget)
    return Endpoint(composer, engine, name)


def _engine(options: EndpointOptions) -> tuple[Any, Any, str]:
    """(engine, the tokenizer requests are composed with, the model's name)."""
    if options.engine == "llama.cpp":
        gguf = require_gguf(options.model)
        load_llamacpp()  # one line when llama-cpp-python is not installed here
        return (
            llamacpp_context.ContextEngine(options.kv_dir, gguf),
            load_gguf_tokenizer(gguf),
            gguf.name,
        )
    if options.engine == "vllm":
        engine = VllmEngine.start(options, options.extra_args)
        return engine, engine.tokenizer, engine.model_name
    loaded = load_model(ModelSpec(options.model) if options.model else ModelSpec())
    return (
        transformers_engine.TransformersEngine(options.kv_dir, loaded),
        loaded.tokenizer,
        str(loaded.source),
    )


def endpoint_options(flags: dict[str, Any]) -> EndpointOptions:
    """The endpoint's options from `serve`'s flags (a port not given: the endpoint's own,
    8012, not vLLM's server's 8000)."""
    if flags.get("chunks") is None:
        raise OptionError(
            "chunks", "the endpoint chooses context from a chunks file: give --chunks"
        )
    fields = ("kv_dir", "bundle", "chunks", "registry", "template", "engine", "model", "budget")
    context = flags.get("ctx")
    return EndpointOptions(
        **{k: flags[k] for k in fields},
        host=flags["host"],
        port=EndpointOptions.port if flags.get("port") is None else flags["port"],
        extra_args=tuple(context.args) if context is not None else (),
    )


def serve_endpoint(flags: dict[str, Any]) -> None:
    """`serve --bundle ...`: the endpoint in the foreground until Ctrl-C."""
    options = endpoint_options(flags)
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
