"""The llama.cpp engine behind `prefill-kv --engine` and `serve --engine`: its options checked
before llama.cpp is imported or a model loaded, so a wrong flag is one line and exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from copilot_cli.core.errors import InputError
from copilot_cli.core.gguf import gguf_file
from copilot_cli.core.options import OptionError

ENGINES = ("transformers", "llama.cpp")


def _gguf(model: str) -> Path:
    found = gguf_file(model) if model else None
    if found is None:
        raise InputError("--engine llama.cpp needs --model FILE.gguf", where=model or "--model")
    return found


def _llamacpp(engine: str) -> Any:
    if engine not in ENGINES:
        raise OptionError("engine", f"use one of {', '.join(ENGINES)}")
    try:
        from copilot_cli.serving import llamacpp
    except ImportError:
        raise OptionError(
            "engine", "llama-cpp-python is not installed here (make llamacpp-env, then run in "
            ".venv-llamacpp)",
        ) from None  # fmt: skip
    return llamacpp


def load_llamacpp() -> Any:
    """The llama.cpp serving module (serving/llamacpp.py), or OptionError naming --engine
    when llama-cpp-python is not installed here."""
    return _llamacpp("llama.cpp")


def prefill_llamacpp(
    engine: str, bundle: Path | None, texts: tuple[Path, ...], model: str, out: Path
) -> Any:
    """Slot files of the bundle's static prefixes and `texts`, computed by llama.cpp."""
    if bundle is None and not texts:
        raise OptionError("bundle", "give a bundle or --text files")
    gguf = _gguf(model)
    module = _llamacpp(engine)
    return module.prefill_slots(module.bundle_prefixes(bundle, texts), gguf, out)


def serve_llamacpp(kv_dir: Path, model: str, host: str, port: int) -> None:
    """llama.cpp with the slot folder, over HTTP (serving/llamacpp.serve_http)."""
    gguf = _gguf(model)
    module = _llamacpp("llama.cpp")
    server = module.SlotServer(kv_dir, gguf)
    print(f"serving {kv_dir} with {gguf.name} on http://{host}:{port}/completion", flush=True)
    module.serve_http(server, host, port)
