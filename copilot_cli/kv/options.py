"""Settings of prefill-kv (no torch import: the CLI builds these)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from copilot_cli.core.cluster import require_target
from copilot_cli.core.engines import refuse_ignored
from copilot_cli.core.modelspec import ModelSpec
from copilot_cli.core.options import coerce_paths, require, require_count, setting
from copilot_cli.core.outputs import check_output_shape

DEFAULT_MAX_BYTES = 2 << 30  # host memory for loaded segments (PrefixStore, the connector)
MAX_BLOCK_SIZE = 1 << 16  # and never more than the model's context (checked at run time)


@dataclass(frozen=True)
class PrefillOptions:
    """Settings of prefill-kv.

    Attributes:
        out: the KV folder to write.
        bundle: a compiled prompt bundle whose static prefixes to prefill.
        texts: text files, one prefix each (named after the file).
        dtype: the dtype the model runs (and the KV is stored) in; "auto": as the model is
            saved (a bfloat16 checkpoint gives bfloat16 KV), float32 converts.
        block_size: tokens per hashed block (16, as vLLM).
        chunk_size: tokens fed per forward pass (bounds activation memory).
        verify: compare cached vs recomputed logits for every prefix after writing.
        model: the model to load when none is handed in (in `dtype` unless "auto").
        chunks: a chunks file (`chunk`): each distinct snippet's KV is stored as a chunk
            (kv/chunkkv.py), to be placed at any position of a request.
        registry: its registry: chunks taken in rank order (with `top`).
        top: only the `top` first chunks (by rank with a registry, else in file order).
        snippet_format: the snippet format chunks are stored in (as `context --format`).
        ray: None (this process) or a Ray target (`local`, `auto`, an address): subtrees of
            the radix tree are prefilled by actors; the files are the same bytes.
        engine: what computes the KV: "transformers" (a KV folder of safetensors) or
            "llama.cpp" (llama.cpp's own slot files, for its server; `model` names a GGUF).
            Settings llama.cpp does not honour (verify, ray, dtype, block and chunk sizes, the
            device) are refused with it (core/engines.py).
    """

    out: Path = setting(Path("build/kv"), yaml=False, help="KV folder to write.")
    bundle: Path | None = setting(
        None, yaml=False, help="Prompt bundle written by compile-templates."
    )
    texts: tuple[Path, ...] = setting(
        (), yaml=False, help="A prefix text file (repeatable).", flag="--text"
    )
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    block_size: int = setting(16, help="Tokens per hashed block.")
    chunk_size: int = setting(256, help="Tokens per forward pass.")
    verify: bool = setting(False, help="Compare cached vs recomputed logits; exit 1 if off.")
    model: ModelSpec = setting(default_factory=ModelSpec, yaml=False)
    ray: str | None = setting(None, yaml=False)
    chunks: Path | None = setting(None, yaml=False, help="Chunks file: store each chunk's KV too.")
    registry: Path | None = setting(None, yaml=False, help="Its registry: chunks in rank order.")
    top: int | None = setting(None, yaml=False, help="Only the N first chunks.")
    snippet_format: Literal["auto", "xml", "file-sep"] = setting(
        "auto", yaml=False, help="auto (as the templates write it), xml, file-sep."
    )
    engine: str = setting(
        "transformers", help="transformers (KV folder) or llama.cpp (slot files)."
    )

    def __post_init__(self) -> None:
        coerce_paths(self)
        refuse_ignored(self.engine, "prefill-kv", self)
        require_target(self.ray)
        require(
            self.dtype in ("auto", "float32", "float16", "bfloat16"),
            "dtype",
            "choose auto (as saved), float32, float16 or bfloat16",
        )
        require_count(self.block_size, "block_size", low=1, high=MAX_BLOCK_SIZE)
        require_count(self.chunk_size, "chunk_size", low=1, high=MAX_BLOCK_SIZE)
        check_output_shape(self.out, "out", folder=True)
        if self.bundle is not None:
            require(self.bundle.is_dir(), "bundle", f"{self.bundle} is not a bundle folder")
        require(
            self.chunks is None or self.chunks.is_file(), "chunks", f"{self.chunks} is not a file"
        )
        require(
            self.registry is None or self.chunks is not None, "registry", "give --chunks with it"
        )
        require(
            self.registry is None or self.registry.is_file(),
            "registry",
            f"{self.registry} is not a file",
        )
        if self.top is not None:
            require_count(self.top, "top", low=1)
        require(
            self.snippet_format in ("auto", "xml", "file-sep"),
            "snippet_format",
            "choose auto, xml or file-sep",
        )
        for path in self.texts:
            require(path.is_file(), "texts", f"{path} is not a file")

    def model_spec(self) -> ModelSpec:
        """`model` in this run's dtype ("auto": as the model spec says, by default as saved)."""

        return self.model if self.dtype == "auto" else replace(self.model, dtype=self.dtype)


@dataclass(frozen=True)
class PrefixSource:
    """A named prefix: text (tokenized with leading specials when `add_special`) or token ids."""

    name: str
    text: str
    origin: str
    add_special: bool = True
    token_ids: tuple[int, ...] | None = None  # given ids win over tokenizing `text`
    kind: str = "prefix"  # "chunk": chunk KV (kv/chunkkv.py), its own tokens after a lead
    lead_tokens: int = 0
