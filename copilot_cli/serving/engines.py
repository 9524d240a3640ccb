"""The llama.cpp engine behind `prefill-kv --engine` and `serve --engine`: its options checked
before llama.cpp is imported or a model loaded, so a wrong flag is one line and exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from copilot_cli.core.errors import InputError
from copilot_cli.core.gguf import gguf_file
from copilot_cli.core.options import OptionError

ENGINES = ("transformers", "llama.cpp")


def require_gguf(model: str) -> Path:
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


# prefill-kv flags the llama.cpp engine does not honour: given, they are refused (one line)
_UNHONOURED = {
    "verify": ("--verify", False),
    "ray": ("--ray", None),
    "dtype": ("--dtype", "auto"),
    "block_size": ("--block-size", 16),
    "chunk_size": ("--chunk-size", 256),
}


def refuse_unhonoured(engine: str, options: Any) -> None:
    """Refuse prefill-kv flags `engine` would ignore (llama.cpp computes in its own types,
    blocks and batches, in this process)."""
    if engine not in ENGINES:
        raise OptionError("engine", f"use one of {', '.join(ENGINES)}")
    for field, (flag, default) in _UNHONOURED.items():
        if getattr(options, field) != default:
            raise OptionError(field, f"{flag} is not honoured by --engine {engine}: leave it out")
    if options.model.device != "cpu":
        raise OptionError("device", f"--device is not honoured by --engine {engine}")


def load_llamacpp() -> Any:
    """The llama.cpp serving module (serving/llamacpp.py), or OptionError naming --engine
    when llama-cpp-python is not installed here."""
    return _llamacpp("llama.cpp")


def prefill_llamacpp(
    engine: str,
    bundle: Path | None,
    texts: tuple[Path, ...],
    model: str,
    out: Path,
    chunks: Any = None,
) -> Any:
    """Slot files of the bundle's static prefixes and `texts`, computed by llama.cpp; with
    `chunks` (a ChunkSlots), each snippet's and each template's context-opened prefix too."""
    if bundle is None and not texts and chunks is None:
        raise OptionError("bundle", "give a bundle, --text files or --chunks")
    gguf = require_gguf(model)
    module = _llamacpp(engine)
    sources: list[Any] = [
        module.SlotSource(name, text)
        for name, text in module.bundle_prefixes(bundle, texts).items()
    ]
    if chunks is not None:
        sources += chunk_slot_sources(module, gguf, bundle, chunks)
    return module.prefill_slots(sources, gguf, out)


def chunk_slot_sources(module: Any, gguf: Path, bundle: Path | None, chunks: Any) -> list[Any]:
    """The snippets of a chunks file (and each template's context-opened prefix) as slot
    sources: token ids from the GGUF's own tokenizer, as the endpoint composes requests."""
    from copilot_cli.core.fingerprints import tokenizer_fingerprint
    from copilot_cli.core.gguf import load_gguf_tokenizer
    from copilot_cli.kv import bundle_snippet_format, chunk_sources, context_openings

    tokenizer = load_gguf_tokenizer(gguf)
    fmt, openings = chunks.snippet_format, []
    if bundle is not None:  # snippets stored in the format the templates write them in
        from copilot_cli.prompts import load_bundle

        loaded = load_bundle(bundle)
        fmt = bundle_snippet_format(loaded, tokenizer, fmt)
        openings = context_openings(loaded, tokenizer, fmt)
    found = openings + chunk_sources(
        chunks.chunks, chunks.registry, chunks.top, tokenizer, tokenizer_fingerprint(tokenizer),
        fmt,
    )  # fmt: skip
    return [
        module.SlotSource(s.name, s.text, tuple(s.token_ids or ()), s.kind, s.lead_tokens)
        for s in found
    ]


def serve_llamacpp(kv_dir: Path, model: str, host: str, port: int) -> None:
    """llama.cpp with the slot folder, over HTTP (serving/llamacpp.serve_http)."""
    gguf = require_gguf(model)
    module = _llamacpp("llama.cpp")
    server = module.SlotServer(kv_dir, gguf)
    print(f"serving {kv_dir} with {gguf.name} on http://{host}:{port}/completion", flush=True)
    module.serve_http(server, host, port)
