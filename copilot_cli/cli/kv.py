"""`copilot-opt prefill-kv` and `copilot-opt inspect`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from copilot_cli.cli.common import (
    JsonOpt,
    handle_errors,
    key_value_table,
    option,
    print_json,
    stderr_console,
    stdout_console,
)
from copilot_cli.cli.model_options import AllowDownloadOpt, DeviceOpt, ModelOpt, model_spec
from copilot_cli.core import progress
from copilot_cli.core.errors import CheckFailed, InputError


@handle_errors
def prefill_kv_command(
    bundle: Annotated[
        Path | None, typer.Argument(help="Prompt bundle written by compile-templates.")
    ] = None,
    out: Annotated[Path, option("--out", "-o", help="KV folder to write.")] = Path("build/kv"),
    text: Annotated[
        list[Path] | None, option("--text", help="A prefix text file (repeatable).")
    ] = None,
    model: ModelOpt = "",
    dtype: Annotated[str, option("--dtype", help="float32, float16 or bfloat16.")] = "float32",
    block_size: Annotated[int, option("--block-size", help="Tokens per hashed block.")] = 16,
    chunk_size: Annotated[int, option("--chunk-size", help="Tokens per forward pass.")] = 256,
    verify: Annotated[
        bool, option("--verify", help="Compare cached vs recomputed logits; exit 1 if off.")
    ] = False,
    device: DeviceOpt = "cpu",
    allow_download: AllowDownloadOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Compute the static prefixes' KV caches once and write them as verified safetensors."""
    from copilot_cli.core.models import load_model
    from copilot_cli.kv import PrefillOptions, prefill_kv, verify_prefixes
    from copilot_cli.kv.builder import prefixes_from_bundle, prefixes_from_files

    if dtype not in ("float32", "float16", "bfloat16"):
        raise InputError("choose float32, float16 or bfloat16", where="--dtype")
    if bundle is None and not text:
        raise InputError("give a prompt bundle or at least one --text file", where="BUNDLE")
    options = PrefillOptions(out=out, block_size=block_size, chunk_size=chunk_size)
    with progress.progress("loading model"):
        loaded = load_model(model_spec(model, device, dtype, allow_download))
    sources = []
    if bundle is not None:
        sources += prefixes_from_bundle(bundle, loaded.tokenizer_fingerprint)
    sources += prefixes_from_files(list(text or []))
    with progress.progress("prefilling"):
        result = prefill_kv(loaded, sources, options)
    for warning in result.warnings:
        stderr_console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    reports = []
    if verify:
        with progress.progress("verifying"):
            reports = verify_prefixes(loaded, out)
    if json_output:
        print_json({**result.to_dict(), "verify": [r.to_dict() for r in reports]})
    else:
        table = Table(title=f"KV {result.out}", title_justify="left")
        for column in ("prefix", "tokens", "segments", "blocks", "origin"):
            table.add_column(column)
        for p in result.prefixes:
            table.add_row(p.name, str(p.tokens), str(p.segments), str(p.block_hashes), p.origin)
        stdout_console.print(table)
        stdout_console.print(
            f"{result.sum_prefix_tokens} prefix tokens stored as {result.distinct_tokens} "
            f"distinct ({result.computed_tokens} computed, {result.reused_tokens} reused), "
            f"{result.bytes_on_disk:,} bytes, {result.seconds:.2f}s"
        )
        if reports:
            vt = Table(title="verify", title_justify="left")
            for column in ("prefix", "max |Δlogit|", "tolerance", "greedy agreement", "ok"):
                vt.add_column(column)
            for r in reports:
                vt.add_row(
                    r.name,
                    f"{r.max_abs_diff:.2e}",
                    f"{r.tolerance:.0e}",
                    f"{r.greedy_agreement:.1%}",
                    "yes" if r.passed else "NO",
                )
            stdout_console.print(vt)
    failed = [r.name for r in reports if not r.passed]
    if failed:
        raise CheckFailed(f"verify: cached logits differ beyond tolerance for {', '.join(failed)}")


@handle_errors
def inspect_command(
    path: Annotated[Path, typer.Argument(help="A KV folder or one segment file.")],
    json_output: JsonOpt = False,
) -> None:
    """Show what a KV folder or segment file holds."""
    from copilot_cli.kv.inspect import describe

    info = describe(path)
    if json_output:
        print_json(info)
        return
    rows = [(k, v) for k, v in info.items() if k not in ("prefixes", "geometry")]
    stdout_console.print(key_value_table(str(path), rows))
    if info.get("prefixes"):
        table = Table(title="prefixes", title_justify="left")
        for column in ("name", "tokens", "segments", "block hashes", "origin"):
            table.add_column(column)
        for p in info["prefixes"]:
            table.add_row(
                p["name"], str(p["tokens"]), str(p["segments"]), str(p["block_hashes"]), p["origin"]
            )
        stdout_console.print(table)
