"""`copilot-opt chunk`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from copilot_cli import chunking
from copilot_cli.chunking.options import ChunkOptions
from copilot_cli.cli.common import JsonOpt, option, print_json, warn
from copilot_cli.cli.errors import handle_errors
from copilot_cli.cli.params import ALLOW_DOWNLOAD, RayOpt, from_options
from copilot_cli.core import lazy
from copilot_cli.core.inputs import repository_list

view = lazy.module("copilot_cli.cli.views.chunk")


@handle_errors
def chunk_command(
    repos: list[Path] | None = from_options(ChunkOptions, "repos", default=None, argument=True),
    repos_from: Annotated[
        Path | None,
        option("--repos-from", help="A file naming repository folders, one per line."),
    ] = None,
    out: Path = from_options(ChunkOptions, "out", "-o"),
    tokenizer: str = from_options(ChunkOptions, "tokenizer", "--model", "-m"),
    max_tokens: int = from_options(ChunkOptions, "max_tokens"),
    reserve: int = from_options(ChunkOptions, "reserve"),
    include: list[str] | None = from_options(ChunkOptions, "include", default=None),
    exclude: list[str] | None = from_options(ChunkOptions, "exclude", default=None),
    jobs: int | None = from_options(ChunkOptions, "jobs", "-j"),
    registry: Path | None = from_options(ChunkOptions, "registry"),
    no_gitignore: bool = from_options(ChunkOptions, "use_gitignore"),
    no_cache: bool = from_options(ChunkOptions, "use_cache"),
    follow_symlinks: bool = from_options(ChunkOptions, "follow_symlinks"),
    ray: RayOpt = None,
    allow_download: bool = ALLOW_DOWNLOAD,
    json_output: JsonOpt = False,
) -> None:
    """Split repositories into token-exact, entity-aligned, deduplicated chunks."""
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
    result = chunking.chunk_repository(options)
    for message in result.warnings:
        warn(message)
    if json_output:
        print_json(result.to_dict())
    else:
        view.show(result, max_tokens)
