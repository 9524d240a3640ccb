"""`copilot-opt prefill-kv`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from copilot_cli import kv
from copilot_cli.cli.common import JsonOpt, print_json, warn
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import (
    ALLOW_DOWNLOAD,
    DEVICE,
    DTYPE,
    MODEL,
    RayOpt,
    from_options,
    model_spec,
)
from copilot_cli.core import lazy
from copilot_cli.kv.options import PrefillOptions

view = lazy.module("copilot_cli.cli.views.kv")


@handle_errors
def prefill_kv_command(
    bundle: Path | None = from_options(PrefillOptions, "bundle", argument=True),
    out: Path = from_options(PrefillOptions, "out", "-o"),
    texts: list[Path] | None = from_options(PrefillOptions, "texts", default=None),
    chunks: Path | None = from_options(PrefillOptions, "chunks"),
    registry: Path | None = from_options(PrefillOptions, "registry"),
    top: int | None = from_options(PrefillOptions, "top"),
    snippet_format: str = from_options(PrefillOptions, "snippet_format"),
    model: str = MODEL,
    engine: str = from_options(PrefillOptions, "engine"),
    dtype: str = DTYPE,
    block_size: int = from_options(PrefillOptions, "block_size"),
    chunk_size: int = from_options(PrefillOptions, "chunk_size"),
    verify: bool = from_options(PrefillOptions, "verify"),
    device: str = DEVICE,
    allow_download: bool = ALLOW_DOWNLOAD,
    ray: RayOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Compute the static prefixes' KV caches once and write them as verified safetensors."""
    options = PrefillOptions(
        out=out,
        bundle=bundle,
        texts=tuple(texts or ()),
        dtype=dtype,
        block_size=block_size,
        chunk_size=chunk_size,
        verify=verify,
        model=model_spec(model, device, "auto", allow_download),
        ray=ray,
        chunks=chunks,
        registry=registry,
        top=top,
        snippet_format=snippet_format,
        engine=engine,
    )
    if engine != "transformers":
        return _slots(options, json_output)
    result = kv.prefill_kv(options)
    for message in result.warnings:
        warn(message)
    if json_output:
        print_json(result.to_dict())
    else:
        view.show_prefill(result)
    result.raise_for_failures()


def _slots(options: Any, js: bool) -> None:
    """prefill-kv --engine llama.cpp: slot files and their index (the options refused what
    llama.cpp would ignore)."""
    index = kv.prefill_llamacpp(options)
    if js:
        print_json(index.to_dict())
        return
    for prefix in index.prefixes:
        typer.echo(f"{prefix.name}: {len(prefix.token_ids)} tokens, {prefix.bytes:,} bytes")
    typer.echo(f"wrote {options.out} (llama.cpp {index.llama_cpp_version}, {index.gguf_name})")
