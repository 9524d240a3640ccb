"""`copilot-opt prefill-kv`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from copilot_cli.cli.common import JsonOpt, option, print_json, warn
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import (
    DEFAULT_DEVICE,
    AllowDownloadOpt,
    DeviceOpt,
    DtypeOpt,
    ModelOpt,
    RayOpt,
    model_spec,
)


@handle_errors
def prefill_kv_command(
    bundle: Annotated[
        Path | None, typer.Argument(help="Prompt bundle written by compile-templates.")
    ] = None,
    out: Annotated[Path, option("--out", "-o", help="KV folder to write.")] = Path("build/kv"),
    texts: Annotated[
        list[Path] | None, option("--text", help="A prefix text file (repeatable).")
    ] = None,
    chunks: Annotated[
        Path | None, option("--chunks", help="Chunks file: store each chunk's KV too.")
    ] = None,
    registry: Annotated[
        Path | None, option("--registry", help="Its registry: chunks in rank order.")
    ] = None,
    top: Annotated[int | None, option("--top", help="Only the N first chunks.")] = None,
    snippet_format: Annotated[
        str, option("--snippet-format", help="auto (as the templates write it), xml, file-sep.")
    ] = "auto",
    model: ModelOpt = "",
    engine: Annotated[
        str, option("--engine", help="transformers (KV folder) or llama.cpp (slot files).")
    ] = "transformers",
    dtype: DtypeOpt = "auto",
    block_size: Annotated[int, option("--block-size", help="Tokens per hashed block.")] = 16,
    chunk_size: Annotated[int, option("--chunk-size", help="Tokens per forward pass.")] = 256,
    verify: Annotated[
        bool, option("--verify", help="Compare cached vs recomputed logits; exit 1 if off.")
    ] = False,
    device: DeviceOpt = DEFAULT_DEVICE,
    allow_download: AllowDownloadOpt = False,
    ray: RayOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Compute the static prefixes' KV caches once and write them as verified safetensors."""
    from copilot_cli.cli.views.kv import show_prefill
    from copilot_cli.kv import PrefillOptions, prefill_kv

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
    result = prefill_kv(options)
    for message in result.warnings:
        warn(message)
    if json_output:
        print_json(result.to_dict())
    else:
        show_prefill(result)
    result.raise_for_failures()


def _slots(options: Any, js: bool) -> None:
    """prefill-kv --engine llama.cpp: slot files and their index (the options refused what
    llama.cpp would ignore)."""
    from copilot_cli.kv import prefill_llamacpp

    index = prefill_llamacpp(options)
    if js:
        print_json(index.to_dict())
        return
    for prefix in index.prefixes:
        typer.echo(f"{prefix.name}: {len(prefix.token_ids)} tokens, {prefix.bytes:,} bytes")
    typer.echo(f"wrote {options.out} (llama.cpp {index.llama_cpp_version}, {index.gguf_name})")
