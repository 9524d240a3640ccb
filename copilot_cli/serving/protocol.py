"""The completion requests editors send, parsed into one typed request, and the answers in the
shape each protocol expects.

    POST /infill              llama.cpp server's shape, what llama.vscode and llama.vim send:
                              input_prefix, input_suffix, input_extra [{filename, text}],
                              prompt (the text typed after input_prefix), n_predict, stream,
                              n_indent and t_max_predict_ms (honoured as llama.cpp server
                              does), and sampling fields (accepted; completions are greedy);
                              n_predict 0 (llama.vscode's ring-buffer update) answers at once
    POST /v1/completions      OpenAI's: prompt (the text before the cursor), suffix,
                              max_tokens, stream, model, ...

Both take an optional extension object `copilot` = {"file": PATH inside the repository,
"budget": tokens of repository context}: the file the editor is in (its own chunks are never
chosen, and the context is selected for it). A request names files the way the chunks do:
relative, never absolute or through `..` (the rule of `context --file`).

Every malformed request is a `RequestError` with an HTTP status and one line.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from copilot_cli.core.inputs import repository_name_problem

MAX_BODY = 8 << 20  # bytes of a request body
MAX_PREDICT = 4096
MAX_EXTRA = 64  # input_extra chunks taken from one request
DEFAULT_PREDICT = 64


class RequestError(Exception):
    """A request the endpoint refuses: `status` (4xx) and one line saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Extra:
    """A chunk the editor sends itself (llama.vscode's ring buffer of recent text)."""

    filename: str
    text: str


@dataclass(frozen=True)
class CompletionRequest:
    """What an editor asks for, whatever its protocol."""

    protocol: str  # "infill" | "openai"
    prefix: str  # the text before the cursor
    suffix: str  # the text after it
    file: str = ""  # the file being edited, as the chunks name it ("" unknown)
    extra: tuple[Extra, ...] = ()
    max_tokens: int = DEFAULT_PREDICT
    stream: bool = False
    budget: int | None = None  # tokens of repository context (None: the server's)
    model: str = ""
    stop: tuple[str, ...] = field(default_factory=tuple)
    n_indent: int = 0  # /infill: a line indented less than this ends the completion
    t_max_predict_ms: int = 0  # /infill: past this, the first newline ends the completion


def parse(path: str, body: bytes) -> CompletionRequest:
    """The request at `path` with this JSON body.

    Raises:
        RequestError: 404 for another path, 413 for a body over MAX_BODY, 400 otherwise.
    """
    if path not in ("/infill", "/v1/completions", "/completion"):
        raise RequestError(404, f"no such endpoint {path!r} (POST /infill or /v1/completions)")
    if len(body) > MAX_BODY:
        raise RequestError(413, f"the request body is over {MAX_BODY:,} bytes")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise RequestError(400, f"the body is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RequestError(400, "the body must be a JSON object")
    if path == "/v1/completions":
        return _openai(data)
    return _infill(data)


def _text(data: dict[str, Any], key: str, default: str | None = None) -> str:
    value = data.get(key, default)
    if value is None:
        raise RequestError(400, f"{key!r} is missing")
    if not isinstance(value, str):
        raise RequestError(400, f"{key!r} must be a string")
    return value


def _count(data: dict[str, Any], key: str, default: int, high: int) -> int:
    value = data.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise RequestError(400, f"{key!r} must be a whole number from 0 to {high}")
    return value


def _stream(data: dict[str, Any]) -> bool:
    value = data.get("stream", False)
    if not isinstance(value, bool):
        raise RequestError(400, "'stream' must be true or false")
    return value


def _extension(data: dict[str, Any]) -> tuple[str, int | None]:
    ext = data.get("copilot") or {}
    if not isinstance(ext, dict):
        raise RequestError(400, "'copilot' must be an object {file, budget}")
    file = ext.get("file", data.get("input_filename", ""))
    if not isinstance(file, str):
        raise RequestError(400, "'copilot.file' must be a path")
    if file and (problem := repository_name_problem(file)):
        raise RequestError(400, f"'copilot.file' {file!r} {problem}")
    budget = ext.get("budget")
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= 1 << 16
    ):
        raise RequestError(400, "'copilot.budget' must be a token count from 1 to 65536")
    return file, budget


def _stops(data: dict[str, Any]) -> tuple[str, ...]:
    stop = data.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise RequestError(400, "'stop' must be a string or a list of strings")
    return tuple(stops[:8])


def _infill(data: dict[str, Any]) -> CompletionRequest:
    extra = data.get("input_extra") or []
    if not isinstance(extra, list):
        raise RequestError(400, "'input_extra' must be a list of {filename, text}")
    chunks = []
    for index, item in enumerate(extra[:MAX_EXTRA]):
        if not (
            isinstance(item, dict)
            and isinstance(item.get("text"), str)
            and isinstance(item.get("filename", ""), str)
        ):
            raise RequestError(400, f"'input_extra'[{index}] must be {{filename, text}}")
        chunks.append(Extra(item.get("filename", ""), item["text"]))
    file, budget = _extension(data)
    if "input_prefix" not in data and "prompt" not in data:
        raise RequestError(400, "'input_prefix' is missing")
    return CompletionRequest(
        protocol="infill",
        prefix=_text(data, "input_prefix", "") + _text(data, "prompt", ""),
        suffix=_text(data, "input_suffix", ""),
        file=file,
        extra=tuple(chunks),
        max_tokens=_count(data, "n_predict", DEFAULT_PREDICT, MAX_PREDICT),
        stream=_stream(data),
        budget=budget,
        stop=_stops(data),
        n_indent=_count(data, "n_indent", 0, 1 << 10),
        t_max_predict_ms=_count(data, "t_max_predict_ms", 0, 1 << 30),
    )


def _openai(data: dict[str, Any]) -> CompletionRequest:
    prompt = data.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]  # a one-prompt batch
    if not isinstance(prompt, str):
        raise RequestError(400, "'prompt' must be a string (one prompt a request)")
    file, budget = _extension(data)
    return CompletionRequest(
        protocol="openai",
        prefix=prompt,
        suffix=_text(data, "suffix", ""),
        file=file,
        max_tokens=_count(data, "max_tokens", 16, MAX_PREDICT),
        stream=_stream(data),
        budget=budget,
        model=_text(data, "model", ""),
        stop=_stops(data),
    )


# -- answers ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    """A finished (or streaming) completion and what made it."""

    text: str
    tokens: list[int]
    finish_reason: str  # "length" | "stop"
    prompt_tokens: int
    cached_tokens: int  # restored or placed, not computed
    prompt_ms: float
    predicted_ms: float
    snippets: list[dict[str, Any]]
    model: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # compose_ms, recomputed_tokens, note


def _copilot(outcome: Outcome) -> dict[str, Any]:
    return {"snippets": outcome.snippets, "cached_tokens": outcome.cached_tokens, **outcome.extra}


def answer(request: CompletionRequest, outcome: Outcome) -> dict[str, Any]:
    """The whole answer (stream off) in the request's protocol, with `copilot` beside it."""
    if request.protocol == "openai":
        return {
            "id": f"cmpl-{int(time.time() * 1000)}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": request.model or outcome.model,
            "choices": [
                {
                    "text": outcome.text,
                    "index": 0,
                    "logprobs": None,
                    "finish_reason": outcome.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": outcome.prompt_tokens,
                "completion_tokens": len(outcome.tokens),
                "total_tokens": outcome.prompt_tokens + len(outcome.tokens),
            },
            "copilot": _copilot(outcome),
        }
    return {
        "content": outcome.text,
        "tokens": outcome.tokens,
        "stop": True,
        "stop_type": "limit" if outcome.finish_reason == "length" else "eos",
        "tokens_cached": outcome.cached_tokens,
        "tokens_evaluated": outcome.prompt_tokens - outcome.cached_tokens,
        "truncated": False,
        "timings": _timings(outcome),
        "copilot": _copilot(outcome),
    }


def _timings(outcome: Outcome) -> dict[str, Any]:
    computed = max(outcome.prompt_tokens - outcome.cached_tokens, 0)
    predicted = len(outcome.tokens)
    return {
        "prompt_n": computed,
        "prompt_ms": round(outcome.prompt_ms, 3),
        "prompt_per_second": round(computed / max(outcome.prompt_ms / 1000, 1e-9), 3),
        "cache_n": outcome.cached_tokens,
        "predicted_n": predicted,
        "predicted_ms": round(outcome.predicted_ms, 3),
        "predicted_per_second": round(predicted / max(outcome.predicted_ms / 1000, 1e-9), 3),
    }


def stream_event(request: CompletionRequest, text: str, token: int | None) -> bytes:
    """One server-sent event carrying the next piece of text."""
    if request.protocol == "openai":
        body = {
            "object": "text_completion",
            "model": request.model,
            "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": None}],
        }
    else:
        body = {"content": text, "tokens": [] if token is None else [token], "stop": False}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def stream_end(request: CompletionRequest, outcome: Outcome) -> bytes:
    """The last events: the finish (with `copilot`), and OpenAI's `[DONE]`."""
    if request.protocol == "openai":
        last = {
            "object": "text_completion",
            "model": request.model or outcome.model,
            "choices": [
                {"text": "", "index": 0, "logprobs": None, "finish_reason": outcome.finish_reason}
            ],
            "copilot": _copilot(outcome),
        }
        return b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n"
    last = {
        "content": "",
        "tokens": [],
        "stop": True,
        "stop_type": "limit" if outcome.finish_reason == "length" else "eos",
        "tokens_cached": outcome.cached_tokens,
        "timings": _timings(outcome),
        "copilot": _copilot(outcome),
    }
    return b"data: " + json.dumps(last).encode() + b"\n\n"


def error_body(request_path: str, error: RequestError) -> dict[str, Any]:
    """The error in the protocol's shape (both read `error.message`)."""
    kind = "invalid_request_error" if error.status < 500 else "server_error"
    return {"error": {"code": error.status, "message": error.message, "type": kind}}


def send_json(handler: Any, status: int, body: Any) -> None:
    """`body` as a JSON answer with `status` on a BaseHTTPRequestHandler (Content-Length set:
    editors keep the connection open)."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
