"""Settings and results of chunk (no torch import: the CLI builds these)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from copilot_cli.core.cluster import require_target
from copilot_cli.core.inputs import repository_folder_problem
from copilot_cli.core.options import coerce_paths, require, require_count, setting
from copilot_cli.core.outputs import check_output_shape
from copilot_cli.paths import SAMPLE_REPO

MAX_TOKENS = 1 << 20  # and never more than the model's context (checked at run time)


def max_jobs() -> int:
    """Worker processes beyond the cores only add memory and start-up time."""
    return os.cpu_count() or 1


@dataclass(frozen=True)
class ChunkOptions:
    """Settings of chunk.

    Attributes:
        repos: the repository folders (several: paths in the output are prefixed by each
            repository's folder name, which must differ).
        out: the JSONL file to write.
        max_tokens: no chunk (scope header included) exceeds this many tokens.
        reserve: tokens kept free for the instruction header; max_tokens + reserve must fit
            the model's context.
        include, exclude: glob patterns on repository-relative paths.
        jobs: worker processes (default: all cores; at most the number of cores).
        registry: where to write the ranked chunk registry (JSON), or None.
        use_gitignore: honour .gitignore files.
        size_limit: files larger than this many bytes are skipped.
        repeat_window: lines per window of the rolling hash that finds repeated spans.
        use_cache: reuse per-file results keyed by content hash and options.
        follow_symlinks: follow links whose resolved path is inside the repository and not
            ignored (off: links are skipped, as git stores them as paths, not content).
        tokenizer: tokenizer or model folder ("" = the default model); a model folder also
            gives the context limit.
        ray: None (this machine: `jobs` processes) or a Ray target: `local`, `auto`, an
            address (docs/scale.md); the output is byte-identical either way.
    """

    repos: tuple[Path, ...] = setting(
        (SAMPLE_REPO,), yaml=False, help="Repository folders (one or more)."
    )
    out: Path = setting(Path("build/chunks.jsonl"), yaml=False, help="JSONL file to write.")
    max_tokens: int = setting(384, help="Token budget per chunk.")
    reserve: int = setting(128, help="Tokens kept for the instruction.")
    include: tuple[str, ...] = setting((), help="Only matching paths.")
    exclude: tuple[str, ...] = setting((), help="Skip matching paths.")
    jobs: int | None = setting(None, help="Worker processes.")
    registry: Path | None = setting(None, yaml=False, help="Write the ranked chunk registry here.")
    use_gitignore: bool = setting(True, help="Ignore .gitignore.", flag="--no-gitignore")
    size_limit: int = 1_000_000
    repeat_window: int = 8
    use_cache: bool = setting(True, help="Ignore the per-file cache.", flag="--no-cache")
    follow_symlinks: bool = setting(
        False,
        help=(
            "Follow links that resolve inside the repository to a path that is not "
            "ignored (default: links are skipped, as git stores them)."
        ),
    )
    tokenizer: str = setting("", yaml=False, help="Tokenizer or model folder.")
    allow_download: bool = setting(False, yaml=False)
    ray: str | None = setting(None, yaml=False)

    def __post_init__(self) -> None:
        coerce_paths(self)
        object.__setattr__(self, "repos", tuple(Path(r) for r in self.repos))
        require(bool(self.repos), "repos", "give at least one repository folder")
        for repo in self.repos:
            require(repo.exists(), "repos", f"repository folder {repo} does not exist")
            require(repo.is_dir(), "repos", f"expected a repository folder, {repo} is a file")
            problem = repository_folder_problem(repo)
            require(problem is None, "repos", problem or "")
        names = [repo.name for repo in self.repos]
        twice = sorted({n for n in names if names.count(n) > 1})
        require(not twice, "repos", f"two repositories are named {', '.join(twice)}")
        require_target(self.ray)
        require_count(self.max_tokens, "max_tokens", low=1, high=MAX_TOKENS)
        require_count(self.reserve, "reserve", high=MAX_TOKENS)
        if self.jobs is not None:
            require_count(self.jobs, "jobs", low=1, high=max_jobs())
        require_count(self.size_limit, "size_limit", low=1)
        require_count(self.repeat_window, "repeat_window", low=1, high=10_000)
        check_output_shape(self.out, "out", folder=False)
        check_output_shape(self.registry, "registry", folder=False)
        require(
            self.registry is None or self.registry.resolve() != self.out.resolve(),
            "registry",
            f"{self.registry} is also the chunks file (--out): give another path",
        )


@dataclass(frozen=True)
class ChunkSummary:
    """What a chunk run did (the CLI's --json output, with `out`)."""

    files: int
    chunks_written: int
    chunks_total: int
    exact_duplicates_folded: int
    near_duplicates_marked: int
    repeated_spans: int
    languages: dict[str, int]
    fallback_files: list[str]
    parse_errors: list[str]
    non_utf8_files: list[str]
    skipped: dict[str, int]
    skipped_paths: dict[str, list[str]]  # up to 20 per reason
    max_chunk_tokens: int
    bytes: int
    cache_hits: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class ChunkResult:
    out: Path
    summary: ChunkSummary
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), **self.summary.to_dict()}
