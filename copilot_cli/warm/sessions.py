"""Realistic editing sessions over repositories, as a server's request log would show them.

A developer opens a session in one repository (repositories by Zipf popularity), works on a
file for a burst of requests, then moves — mostly to a file it imports or that imports it (the
import graph), sometimes anywhere in the repository (files by Zipf popularity), rarely to
another repository. Each request uses a prompt template (Zipf popularity over templates, and a
developer tends to repeat the last one) and puts chunks of the current file and of a neighbour
into its context. Sessions start as a Poisson process over the working day.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from copilot_cli.chunking import read_chunks
from copilot_cli.warm.log import Request

if TYPE_CHECKING:
    from copilot_cli.chunking import Chunk

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")

# the shipped templates by the popularity generated sessions give them (the first most used)
SHIPPED_TEMPLATES = (
    "code-completion",
    "bug-fix",
    "unit-tests",
    "docstring",
    "review-comment",
    "sql-to-python",
)


@dataclass(frozen=True)
class SessionConfig:
    seed: int = 0
    sessions: int = 300
    day_seconds: float = 8 * 3600.0
    mean_requests: float = 20.0  # per session (geometric)
    mean_burst: float = 4.0  # requests on one file before moving (geometric)
    mean_gap: float = 20.0  # seconds between a session's requests (exponential)
    template_zipf: float = 1.2
    file_zipf: float = 1.1
    repo_zipf: float = 1.0
    repeat_template: float = 0.7  # chance a request reuses the session's last template
    to_neighbour: float = 0.7  # chance a move follows the import graph
    switch_repository: float = 0.05
    chunks_per_file: int = 3
    per_repository_prefixes: bool = False  # prefix ids `template@repository`


@dataclass
class Repository:
    name: str
    files: list[str]  # by popularity (most referenced first)
    chunks: dict[str, list[str]]  # file -> chunk ids in file order
    neighbours: dict[str, list[str]]  # file -> files it imports or that import it


def repositories_from_chunks(path: Path) -> list[Repository]:
    """Repositories, files, chunk ids and the import graph (a file uses a name another file
    defines) from a chunks JSONL (one or several repositories), read and checked by
    `chunking.read_chunks`."""

    read = read_chunks(path)
    several = read.header.repository is None
    by_repo: dict[str, dict[str, list[Chunk]]] = {}
    for chunk in read.chunks:
        for loc in chunk.locations:
            repo, rel = (
                loc.path.split("/", 1) if several else (read.header.repositories[0], loc.path)
            )
            by_repo.setdefault(repo, {}).setdefault(rel, []).append(chunk)
    return [_repository(name, files) for name, files in sorted(by_repo.items())]


def _repository(name: str, files: dict[str, list[Chunk]]) -> Repository:
    defines: dict[str, set[str]] = {}
    for rel, chunks in files.items():
        for chunk in chunks:
            for entity in chunk.entities:
                if len(entity.name) >= 3:
                    defines.setdefault(entity.name, set()).add(rel)
    neighbours: dict[str, set[str]] = {rel: set() for rel in files}
    for rel, chunks in files.items():
        used = {m for c in chunks for m in _IDENT.findall(c.text)}
        for ident in used & defines.keys():
            for other in defines[ident] - {rel}:
                neighbours[rel].add(other)
                neighbours[other].add(rel)
    order = sorted(files, key=lambda f: (-len(neighbours[f]), f))
    return Repository(
        name=name,
        files=order,
        chunks={rel: [c.id for c in chunks] for rel, chunks in files.items()},
        neighbours={rel: sorted(n) for rel, n in neighbours.items()},
    )


def _zipf(rng: random.Random, n: int, s: float) -> int:
    weights = [1 / (k + 1) ** s for k in range(n)]
    return rng.choices(range(n), weights=weights)[0]


def generate_sessions(
    templates: list[str], repositories: list[Repository], config: SessionConfig
) -> list[Request]:
    """Requests of `config.sessions` sessions, in time order (deterministic for a seed)."""
    rng = random.Random(config.seed)
    templates = list(templates)  # by popularity: the first is the most used
    requests: list[Request] = []
    for number in range(config.sessions):
        start = rng.uniform(0, config.day_seconds)
        requests += _session(rng, f"s{number:05d}", start, templates, repositories, config)
    return sorted(requests, key=lambda r: (r.t, r.session))


def _session(
    rng: random.Random,
    session: str,
    t: float,
    templates: list[str],
    repositories: list[Repository],
    config: SessionConfig,
) -> list[Request]:
    repo = repositories[_zipf(rng, len(repositories), config.repo_zipf)]
    current = repo.files[_zipf(rng, len(repo.files), config.file_zipf)]
    template = templates[_zipf(rng, len(templates), config.template_zipf)]
    count = 1 + int(rng.expovariate(1 / config.mean_requests))
    burst = 0
    out = []
    for _ in range(count):
        if rng.random() > config.repeat_template:
            template = templates[_zipf(rng, len(templates), config.template_zipf)]
        if burst <= 0:
            repo, current = _move(rng, repo, current, repositories, config)
            burst = 1 + int(rng.expovariate(1 / config.mean_burst))
        burst -= 1
        neighbour = rng.choice(repo.neighbours[current]) if repo.neighbours[current] else None
        chunks = _chunks(rng, repo, current, neighbour, config.chunks_per_file)
        prefix = f"{template}@{repo.name}" if config.per_repository_prefixes else template
        files = (current,) + ((neighbour,) if neighbour else ())
        out.append(Request(round(t, 3), session, prefix, repo.name, files, chunks))
        t += rng.expovariate(1 / config.mean_gap)
    return out


def _move(
    rng: random.Random,
    repo: Repository,
    current: str,
    repositories: list[Repository],
    config: SessionConfig,
) -> tuple[Repository, str]:
    roll = rng.random()
    if roll < config.switch_repository and len(repositories) > 1:
        repo = repositories[_zipf(rng, len(repositories), config.repo_zipf)]
        return repo, repo.files[_zipf(rng, len(repo.files), config.file_zipf)]
    if roll < config.switch_repository + config.to_neighbour and repo.neighbours[current]:
        return repo, rng.choice(repo.neighbours[current])
    return repo, repo.files[_zipf(rng, len(repo.files), config.file_zipf)]


def _chunks(
    rng: random.Random, repo: Repository, current: str, neighbour: str | None, per_file: int
) -> tuple[str, ...]:
    own = repo.chunks[current]
    start = rng.randrange(max(1, len(own) - per_file + 1))
    picked = own[start : start + per_file]
    if neighbour is not None and repo.chunks[neighbour]:
        picked = picked + [repo.chunks[neighbour][0]]  # its first chunk: imports, signatures
    return tuple(dict.fromkeys(picked))
