"""The llama.cpp engine behind `serve --engine llama.cpp`: its module loaded with one line if
llama-cpp-python is missing, the GGUF checked before a model loads (prefill-kv's side is
kv/slot_prefill.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from copilot_cli.core.engines import llama_cpp_module
from copilot_cli.kv import require_gguf


def load_llamacpp() -> Any:
    """The llama.cpp serving module (serving/llamacpp.py), or OptionError naming --engine
    when llama-cpp-python is not installed here."""
    return llama_cpp_module("copilot_cli.serving.llamacpp")


def serve_llamacpp(kv_dir: Path, model: str, host: str, port: int) -> None:
    """llama.cpp with the slot folder, over HTTP (serving/llamacpp.serve_http)."""
    gguf = require_gguf(model)
    module = load_llamacpp()
    server = module.SlotServer(kv_dir, gguf)
    print(f"serving {kv_dir} with {gguf.name} on http://{host}:{port}/completion", flush=True)
    module.serve_http(server, host, port)
