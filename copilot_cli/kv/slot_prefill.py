"""prefill-kv's llama.cpp engine: the options checked (core/engines.py refuses what llama.cpp
would ignore) before llama.cpp is imported or a model loaded, then the slot files of the
bundle's static prefixes, the text files and the chunks computed by llama.cpp (kv/llamacpp.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from copilot_cli.core.engines import llama_cpp_module
from copilot_cli.core.errors import InputError
from copilot_cli.core.fingerprints import tokenizer_fingerprint
from copilot_cli.core.gguf import gguf_file, load_gguf_tokenizer
from copilot_cli.core.options import OptionError
from copilot_cli.kv.chunkkv import bundle_snippet_format, chunk_sources, context_openings
from copilot_cli.kv.options import PrefillOptions
from copilot_cli.kv.slots import SlotIndex
from copilot_cli.prompts import load_bundle


def require_gguf(model: str) -> Path:
    found = gguf_file(model) if model else None
    if found is None:
        raise InputError("--engine llama.cpp needs --model FILE.gguf", where=model or "--model")
    return found


def prefill_llamacpp(options: PrefillOptions) -> SlotIndex:
    """Slot files of the bundle's static prefixes and `texts`, computed by llama.cpp; with
    `chunks`, each snippet's and each template's context-opened prefix too."""
    if options.engine != "llama.cpp":
        raise OptionError("engine", "slot files are llama.cpp's: give --engine llama.cpp")
    if options.bundle is None and not options.texts and options.chunks is None:
        raise OptionError("bundle", "give a bundle, --text files or --chunks")
    gguf = require_gguf(options.model.name_or_path)
    module = llama_cpp_module("copilot_cli.kv.llamacpp")
    sources: list[Any] = [
        module.SlotSource(name, text)
        for name, text in module.bundle_prefixes(options.bundle, options.texts).items()
    ]
    if options.chunks is not None:
        sources += chunk_slot_sources(module, gguf, options.bundle, options)
    return module.prefill_slots(sources, gguf, options.out)


def chunk_slot_sources(module: Any, gguf: Path, bundle: Path | None, chunks: Any) -> list[Any]:
    """The snippets of a chunks file (and each template's context-opened prefix) as slot
    sources: token ids from the GGUF's own tokenizer, as the endpoint composes requests."""

    tokenizer = load_gguf_tokenizer(gguf)
    fmt, openings = chunks.snippet_format, []
    if bundle is not None:  # snippets stored in the format the templates write them in
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
