"""`copilot-opt chunk`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from copilot_cli.cli.common import (
    JsonOpt,
    handle_errors,
    key_value_table,
    option,
    print_json,
    stderr_console,
    stdout_console,
)
from copilot_cli.cli.model_options import AllowDownloadOpt
from copilot_cli.core import progress


@handle_errors
def chunk_command(
    repo: Annotated[Path, typer.Argument(help="Repository folder.")],
    out: Annotated[Path, option("--out", "-o", help="JSONL file to write.")] = Path(
        "build/chunks.jsonl"
    ),
    tokenizer: Annotated[
        str,
        option(
            "--tokenizer",
            "--model",
            "-m",
            help="Tokenizer or model folder (default: the shipped model).",
        ),
    ] = "",
    max_tokens: Annotated[int, option("--max-tokens", help="Token budget per chunk.")] = 384,
    reserve: Annotated[int, option("--reserve", help="Tokens kept for the instruction.")] = 128,
    include: Annotated[
        list[str] | None, option("--include", help="Only paths matching this glob.")
    ] = None,
    exclude: Annotated[
        list[str] | None, option("--exclude", help="Skip paths matching this glob.")
    ] = None,
    jobs: Annotated[int | None, option("--jobs", "-j", help="Worker processes.")] = None,
    registry: Annotated[
        Path | None, option("--registry", help="Write the ranked chunk registry here.")
    ] = None,
    no_gitignore: Annotated[
        bool, option("--no-gitignore", help="Do not honour .gitignore files.")
    ] = False,
    no_cache: Annotated[bool, option("--no-cache", help="Ignore the per-file cache.")] = False,
    follow_symlinks: Annotated[
        bool,
        option(
            "--follow-symlinks",
            help="Follow links that resolve inside the repository to a path that is not ignored "
            "(default: links are skipped, as git stores them).",
        ),
    ] = False,
    allow_download: AllowDownloadOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Split a repository into token-exact, entity-aligned, deduplicated chunks."""
    from copilot_cli.chunking import ChunkOptions, chunk_repository
    from copilot_cli.core.models import default_model, load_tokenizer

    options = ChunkOptions(
        repo=repo,
        out=out,
        max_tokens=max_tokens,
        reserve=reserve,
        include=tuple(include or ()),
        exclude=tuple(exclude or ()),
        jobs=jobs,
        registry=registry,
        use_gitignore=not no_gitignore,
        use_cache=not no_cache,
        follow_symlinks=follow_symlinks,
    )
    source = tokenizer or default_model()
    with progress.progress("loading tokenizer"):
        loaded = load_tokenizer(source, allow_download=allow_download)
    limit = _context_limit(source)
    with progress.progress(f"chunking {repo}"):
        result = chunk_repository(options, loaded, limit)
    for warning in result.warnings:
        stderr_console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    if json_output:
        print_json({"out": str(result.out), **result.summary})
        return
    s = result.summary
    rows = [
        ("output", result.out),
        ("files", s["files"]),
        (
            "chunks",
            f"{s['chunks_written']} written of {s['chunks_total']} "
            f"({s['exact_duplicates_folded']} exact duplicates folded, "
            f"{s['near_duplicates_marked']} near-duplicates marked)",
        ),
        ("repeated spans", s["repeated_spans"]),
        ("largest chunk", f"{s['max_chunk_tokens']} tokens (budget {max_tokens})"),
        ("languages", ", ".join(f"{k} {v}" for k, v in s["languages"].items())),
        (
            "fallback / parse errors / non-UTF-8",
            f"{len(s['fallback_files'])} / {len(s['parse_errors'])} / {len(s['non_utf8_files'])}",
        ),
        ("skipped", ", ".join(f"{k} {v}" for k, v in s["skipped"].items()) or "none"),
        ("cache hits", s["cache_hits"]),
        ("seconds", s["seconds"]),
    ]
    stdout_console.print(key_value_table("chunk", rows))


def _context_limit(source: str) -> int | None:
    """The model's context when `source` is a model folder (a bare tokenizer has none)."""
    from copilot_cli.core.models import context_length

    config = Path(source) / "config.json"
    if not config.is_file():
        return None
    from transformers import AutoConfig

    try:
        return context_length(AutoConfig.from_pretrained(source, local_files_only=True))
    except Exception:  # a tokenizer-only folder or an unknown config: no context check
        return None
