"""What every endpoint test sends (tests/serving, tests_llamacpp, tests_vllm): llama.vscode's
/infill request (src/llama-server.ts, createRequestPayload), field for field, at a cursor in
the sample repository's server.py, and a POST that returns the status and body whatever the
status."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

FILE = "src/kvstore/server.py"
CODE = (Path(__file__).resolve().parents[2] / "sample_data" / "repo" / FILE).read_text()
CUT = 1500


def infill_body(**changes) -> dict:
    """The request, its ring-buffer chunks carrying `time` besides filename and text."""
    body = {
        "input_prefix": CODE[:CUT],
        "input_suffix": CODE[CUT : CUT + 200],
        "input_extra": [
            {"text": "def helper(x):\n    return x + 1\n", "time": 1733500000, "filename": "h.py"}
        ],
        "prompt": "",
        "n_predict": 12,
        "top_k": 40,
        "top_p": 0.99,
        "stream": False,
        "samplers": ["top_k", "top_p", "infill"],
        "cache_prompt": True,
        "n_indent": 0,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 60_000,  # llama.vscode's default is 1000: answers would hang on load
        "copilot": {"file": FILE},
    }
    body.update(changes)
    return body


def post(url: str, body, *, raw: bytes | None = None, timeout: float = 300) -> tuple[int, bytes]:
    """(status, body bytes) of a JSON POST; a 4xx/5xx is returned, not raised."""
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
