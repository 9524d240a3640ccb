"""llama.cpp as a producer of KV: each static prefix's (and snippet's) slot file computed offline
by llama.cpp itself, what `prefill-kv --engine llama.cpp` and `build` write (needs
llama-cpp-python: make llamacpp-env). serving/llamacpp.py restores them before a request.

The slot files are what llama.cpp's `llama_state_seq_save_file` writes after computing a
prefix: its own kernels' KV, so a restore equals a recompute. The index beside them
(kv/slots.py) records the GGUF's sha256 and llama.cpp's vocabulary fingerprint.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp

from copilot_cli import prompts
from copilot_cli.core.artifacts import canonical_json, sealed, sha256_file, write_bytes
from copilot_cli.core.errors import ArtifactError
from copilot_cli.core.outputs import claim_folder, replaced_folder
from copilot_cli.kv.slots import FORMAT, INDEX, SLOTS, SlotIndex, SlotPrefix

DEFAULT_CONTEXT = 4096


def open_model(gguf: Path, n_ctx: int = DEFAULT_CONTEXT) -> Any:
    """llama.cpp on `gguf`, one sequence, all cores, quiet."""
    return llama_cpp.Llama(
        model_path=str(gguf), n_ctx=n_ctx, n_threads=os.cpu_count() or 1, seed=0, verbose=False
    )


def vocabulary_fingerprint(llm: Any) -> str:
    """sha256 of llama.cpp's vocabulary: every token's text and type, in id order."""
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    digest = hashlib.sha256()
    for token in range(llm.n_vocab()):
        digest.update(llama_cpp.llama_vocab_get_text(vocab, token) or b"")
        digest.update(b"\0%d\0" % llama_cpp.llama_vocab_get_attr(vocab, token))
    return digest.hexdigest()


def tokens_of(llm: Any, text: str) -> list[int]:
    """`text` as llama-server tokenizes a prompt: the model's BOS if it adds one, specials
    parsed."""
    return llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)


@dataclass(frozen=True)
class SlotSource:
    """What one slot file holds: a text llama.cpp tokenizes as llama-server does, or token ids
    given (a snippet after the chunk lead, as `context.snippet_ids` makes them)."""

    name: str
    text: str = ""
    token_ids: tuple[int, ...] | None = None
    kind: str = "prefix"
    lead_tokens: int = 0


def prefill_slots(prefixes: dict[str, str] | list[SlotSource], gguf: Path, out: Path) -> SlotIndex:
    """Compute each named prefix (or source) with llama.cpp and write its slot file and the
    index into `out` (replaced as one unit)."""
    claim_folder(out, "out", fmt=FORMAT, manifest=INDEX, label="llama.cpp slot folder")
    sources = (
        [SlotSource(name, text) for name, text in sorted(prefixes.items())]
        if isinstance(prefixes, dict)
        else sorted(prefixes, key=lambda source: source.name)
    )
    llm = open_model(gguf, max(DEFAULT_CONTEXT, *(len(s.token_ids or ()) + 1 for s in sources)))
    entries = []
    with replaced_folder(out, fmt=FORMAT) as new:
        (new / SLOTS).mkdir()
        for source in sources:
            tokens = list(source.token_ids) if source.token_ids else tokens_of(llm, source.text)
            file = f"{SLOTS}/{hashlib.sha256(source.name.encode()).hexdigest()[:32]}.bin"
            _compute(llm, tokens)
            _save(llm, new / file, tokens)
            size, digest = (new / file).stat().st_size, sha256_file(new / file)
            entries.append(
                SlotPrefix(
                    source.name, tuple(tokens), file, size, digest, source.kind, source.lead_tokens
                )
            )
        index = SlotIndex(
            gguf_name=gguf.name,
            gguf_bytes=gguf.stat().st_size,
            gguf_sha256=sha256_file(gguf),
            tokenizer_fingerprint=vocabulary_fingerprint(llm),
            llama_cpp_version=llama_cpp.__version__,
            prefixes=tuple(entries),
        )
        write_bytes(new / INDEX, canonical_json(sealed(index.to_dict())).encode("utf-8"))
    return index


def clear_context(llm: Any) -> int:
    """Forget every token of the context (Python's record and llama.cpp's memory)."""
    llm.reset()
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)
    return 0


def _compute(llm: Any, tokens: list[int]) -> None:
    clear_context(llm)
    llm.eval(tokens)


def _save(llm: Any, path: Path, tokens: list[int]) -> None:
    array = (llama_cpp.llama_token * len(tokens))(*tokens)
    written = llama_cpp.llama_state_seq_save_file(
        llm.ctx, str(path).encode(), 0, array, len(tokens)
    )
    if written == 0:
        raise ArtifactError("llama.cpp wrote no slot file", where=str(path))


def bundle_prefixes(bundle: Path | None, texts: tuple[Path, ...]) -> dict[str, str]:
    """The static prefix of every template of `bundle`, and each text file, by name (as
    prefill-kv names them: `template:NAME`, `text:FILE`)."""
    prefixes: dict[str, str] = {}
    if bundle is not None:
        loaded = prompts.load_bundle(bundle)
        prefixes.update({name: loaded.static_prefix(name) for name in loaded.templates()})
    for text in texts:
        prefixes[text.name] = text.read_text(encoding="utf-8")
    return prefixes
