"""`copilot-opt chunk`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from copilot_cli.cli.common import JsonOpt, option, print_json, warn
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import AllowDownloadOpt, RayOpt


@handle_errors
def chunk_command(
    repos: Annotated[
        list[Path] | None, typer.Argument(help="Repository folders (one or more).")
    ] = None,
    repos_from: Annotated[
        Path | None,
        option("--repos-from", help="A file naming repository folders, one per line."),
    ] = None,
    out: Annotated[Path, option("--out", "-o", help="JSONL file to write.")] = Path(
        "build/chunks.jsonl"
    ),
    tokenizer: Annotated[
        str, option("--tokenizer", "--model", "-m", help="Tokenizer or model folder.")
    ] = "",
    max_tokens: Annotated[int, option("--max-tokens", help="Token budget per chunk.")] = 384,
    reserve: Annotated[int, option("--reserve", help="Tokens kept for the instruction.")] = 128,
    include: Annotated[list[str] | None, option("--include", help="Only matching paths.")] = None,
    exclude: Annotated[list[str] | None, option("--exclude", help="Skip matching paths.")] = None,
    jobs: Annotated[int | None, option("--jobs", "-j", help="Worker processes.")] = None,
    registry: Annotated[
        Path | None, option("--registry", help="Write the ranked chunk registry here.")
    ] = None,
    no_gitignore: Annotated[bool, option("--no-gitignore", help="Ignore .gitignore.")] = False,
    no_cache: Annotated[bool, option("--no-cache", help="Ignore the per-file cache.")] = False,
    follow_symlinks: Annotated[
        bool,
        option(
            "--follow-symlinks",
            help="Follow links that resolve inside the repository to a path that is not ignored "
            "(default: links are skipped, as git stores them).",
        ),
    ] = False,
    ray: RayOpt = None,
    allow_download: AllowDownloadOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Split repositories into token-exact, entity-aligned, deduplicated chunks."""
    from copilot_cli.chunking import ChunkOptions, chunk_repository
    from copilot_cli.cli.views.chunk import show
    from copilot_cli.core.inputs import repository_list

    options = ChunkOptions(
        repos=(*(repos or ()), *(repository_list(repos_from) if repos_from else ())),
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
        tokenizer=tokenizer,
        allow_download=allow_download,
        ray=ray,
    )
    result = chunk_repository(options)
    for message in result.warnings:
        warn(message)
    if json_output:
        print_json(result.to_dict())
    else:
        show(result, max_tokens)
