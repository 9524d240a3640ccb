"""The typed records of a chunks file and a chunk registry, validated once when read.

A chunks file or registry whose digest is valid can still hold records that are not what they
claim (resealed by hand, or written by a buggy tool): every reader goes through `Chunk.read`
and `RegistryEntry.read`, which check each field's type and range and refuse the first bad
one with an ArtifactError naming the file, the record and the field. Consumers (context,
chunk KV, warm plans) then use attributes, never string keys.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from copilot_cli.core.errors import ArtifactError
from copilot_cli.core.inputs import repository_name_problem

_MAX_TEXT = 1 << 26  # one chunk's text: far above any token budget a chunker packs to


class _Bad(Exception):
    """A field that is not what it must be (turned into an ArtifactError by the caller)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field!r} {problem}")
        self.field = field
        self.problem = problem


def _get(data: dict[str, Any], name: str) -> Any:
    try:
        return data[name]
    except KeyError:
        raise _Bad(name, "is missing") from None


def _str(data: dict[str, Any], name: str, *, empty: bool = True, limit: int = 4096) -> str:
    value = _get(data, name)
    if not isinstance(value, str):
        raise _Bad(name, f"must be a string, not {type(value).__name__}")
    if not empty and not value:
        raise _Bad(name, "must not be empty")
    if len(value) > limit:
        raise _Bad(name, f"is longer than {limit} characters")
    return value


def _int(data: dict[str, Any], name: str, *, low: int = 0) -> int:
    value = _get(data, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(name, f"must be an integer, not {type(value).__name__}")
    if value < low:
        raise _Bad(name, f"must be at least {low}, not {value}")
    return value


def _bool(data: dict[str, Any], name: str) -> bool:
    value = _get(data, name)
    if not isinstance(value, bool):
        raise _Bad(name, f"must be true or false, not {type(value).__name__}")
    return value


def _list(data: dict[str, Any], name: str) -> list[Any]:
    value = _get(data, name)
    if not isinstance(value, list):
        raise _Bad(name, f"must be a list, not {type(value).__name__}")
    return value


def _path(data: dict[str, Any], name: str) -> str:
    value = _str(data, name, empty=False)
    if problem := repository_name_problem(value):
        raise _Bad(name, f"{value!r} {problem}")
    return value


@dataclass(frozen=True)
class Location:
    """Where a chunk's text occurs (one per copy: exact duplicates are stored once)."""

    path: str
    start_line: int
    end_line: int
    start_byte: int
    end_byte: int

    @classmethod
    def from_dict(cls, data: Any) -> Location:
        if not isinstance(data, dict):
            raise _Bad("locations", "must hold objects")
        start_line, start_byte = _int(data, "start_line", low=1), _int(data, "start_byte")
        return cls(
            path=_path(data, "path"),
            start_line=start_line,
            end_line=_int(data, "end_line", low=start_line),
            start_byte=start_byte,
            end_byte=_int(data, "end_byte", low=start_byte),
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Entity:
    """A name a chunk defines (function, class, heading...) and its kind."""

    kind: str
    name: str

    @classmethod
    def from_dict(cls, data: Any) -> Entity:
        if not isinstance(data, dict):
            raise _Bad("entities", "must hold objects")
        return cls(kind=_str(data, "kind", empty=False, limit=64), name=_str(data, "name"))


def _each(data: dict[str, Any], name: str, read: Any) -> tuple[Any, ...]:
    """Every item of list field `name` read by `read`; a bad one named `name[k].field`."""
    out = []
    for k, item in enumerate(_list(data, name)):
        try:
            out.append(read(item))
        except _Bad as bad:
            inner = "" if bad.field == name else f".{bad.field}"
            raise _Bad(f"{name}[{k}]{inner}", bad.problem) from None
    return tuple(out)


def _locations(data: dict[str, Any]) -> tuple[Location, ...]:
    found = _each(data, "locations", Location.from_dict)
    if not found:
        raise _Bad("locations", "must not be empty")
    return found


def _entities(data: dict[str, Any]) -> tuple[Entity, ...]:
    return _each(data, "entities", Entity.from_dict)


@dataclass(frozen=True)
class Chunk:
    """One chunk of a chunks file: its text (token-exact, entity-aligned), where it occurs,
    what it defines. `id` is the first 16 hex digits of `sha256`, the digest of `text`."""

    id: str
    path: str
    text: str
    token_count: int
    start_line: int
    end_line: int
    start_byte: int
    end_byte: int
    language: str
    scope: str
    header: str
    mid_line: bool
    sha256: str
    entities: tuple[Entity, ...]
    locations: tuple[Location, ...]
    near_duplicate_of: str | None = None

    @classmethod
    def read(cls, data: Any, number: int, where: str) -> Chunk:
        """Record `number` (1-based) of the chunks file `where`, every field checked; the
        text against its digest and the id against the digest."""
        try:
            return cls._from_dict(data)
        except _Bad as bad:
            raise ArtifactError(f"chunk {number}: {bad}", where=where) from None

    @classmethod
    def _from_dict(cls, data: Any) -> Chunk:
        if not isinstance(data, dict) or data.get("type") != "chunk":
            raise _Bad("type", "must be 'chunk' (not a chunk record)")
        text = _str(data, "text", limit=_MAX_TEXT)
        sha = _str(data, "sha256", empty=False, limit=64)
        if hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest() != sha:
            raise _Bad("sha256", "is not the digest of the chunk's text")
        chunk_id = _str(data, "id", empty=False, limit=64)
        if chunk_id != sha[:16]:
            raise _Bad("id", f"{chunk_id!r} is not the chunk's digest ({sha[:16]})")
        start_line, start_byte = _int(data, "start_line", low=1), _int(data, "start_byte")
        near = data.get("near_duplicate_of")
        if near is not None and not isinstance(near, str):
            raise _Bad("near_duplicate_of", f"must be a chunk id, not {type(near).__name__}")
        return cls(
            id=chunk_id,
            path=_path(data, "path"),
            text=text,
            token_count=_int(data, "token_count"),
            start_line=start_line,
            end_line=_int(data, "end_line", low=start_line),
            start_byte=start_byte,
            end_byte=_int(data, "end_byte", low=start_byte),
            language=_str(data, "language", empty=False, limit=64),
            scope=_str(data, "scope", limit=1 << 16),
            header=_str(data, "header", limit=1 << 16),
            mid_line=_bool(data, "mid_line"),
            sha256=sha,
            entities=_entities(data),
            locations=_locations(data),
            near_duplicate_of=near,
        )

    @property
    def first_path(self) -> str:
        """The file the chunk is located in first (what a snippet is labelled with)."""
        return self.locations[0].path


@dataclass(frozen=True)
class RegistryEntry:
    """A chunk's registry record: its semantic type, centrality and reuse."""

    id: str
    type: str
    rank: float
    referenced_by: int
    reuse_count: int
    token_count: int
    entities: tuple[Entity, ...]
    locations: tuple[Location, ...]

    @classmethod
    def read(cls, data: Any, number: int, where: str) -> RegistryEntry:
        """Entry `number` (1-based) of the registry `where`, every field checked."""
        try:
            if not isinstance(data, dict):
                raise _Bad("chunks", "must hold objects")
            rank = _get(data, "rank")
            if isinstance(rank, bool) or not isinstance(rank, (int, float)):
                raise _Bad("rank", f"must be a number, not {type(rank).__name__}")
            if not math.isfinite(rank) or rank < 0:
                raise _Bad("rank", f"must be a finite number >= 0, not {rank}")
            return cls(
                id=_str(data, "id", empty=False, limit=64),
                type=_str(data, "type", empty=False, limit=64),
                rank=float(rank),
                referenced_by=_int(data, "referenced_by"),
                reuse_count=_int(data, "reuse_count"),
                token_count=_int(data, "token_count"),
                entities=_entities(data),
                locations=_locations(data),
            )
        except _Bad as bad:
            raise ArtifactError(f"registry entry {number}: {bad}", where=where) from None


@dataclass(frozen=True)
class ChunksHeader:
    """The header line of a chunks file (its format and digest checked by the reader)."""

    digest: str
    tokenizer_fingerprint: str
    max_tokens: int
    repositories: tuple[str, ...]
    raw: dict[str, Any]  # the header as written (inspect shows it; the digest covers it)

    @property
    def repository(self) -> str | None:
        return self.repositories[0] if len(self.repositories) == 1 else None

    @classmethod
    def read(cls, data: dict[str, Any], where: str) -> ChunksHeader:
        try:
            if "repository" in data:
                repositories: tuple[str, ...] = (_str(data, "repository"),)
            else:
                names = _list(data, "repositories")
                if not all(isinstance(n, str) for n in names):
                    raise _Bad("repositories", "must hold names")
                repositories = tuple(names)
            return cls(
                digest=_str(data, "digest", empty=False, limit=64),
                tokenizer_fingerprint=_str(data, "tokenizer_fingerprint", empty=False),
                max_tokens=_int(data, "max_tokens", low=1),
                repositories=repositories,
                raw=data,
            )
        except _Bad as bad:
            raise ArtifactError(f"the header: {bad}", where=where) from None


@dataclass(frozen=True)
class Registry:
    """A chunk registry: entries most central first, and the chunks file it describes."""

    digest: str
    chunks_digest: str
    entries: tuple[RegistryEntry, ...]

    @classmethod
    def read(cls, data: dict[str, Any], where: str) -> Registry:
        try:
            digest = _str(data, "digest", empty=False, limit=64)
            chunks_digest = _str(data, "chunks_digest", empty=False, limit=64)
            raw = _list(data, "chunks")
        except _Bad as bad:
            raise ArtifactError(f"the registry: {bad}", where=where) from None
        entries = tuple(RegistryEntry.read(e, n, where) for n, e in enumerate(raw, 1))
        return cls(digest=digest, chunks_digest=chunks_digest, entries=entries)


@dataclass(frozen=True)
class ChunksFile:
    """A chunks file as read: its header and its chunks, in file order."""

    header: ChunksHeader
    chunks: tuple[Chunk, ...]
