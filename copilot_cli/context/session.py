"""Entry points: a session holds one repository's chunks, registry, index and tokenizer, so a
server or a batch answers many requests from one load; `select_context` is one request."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from copilot_cli.chunking import ChunksHeader, Registry, read_pair
from copilot_cli.context.index import ContextIndex, load_index
from copilot_cli.context.options import (
    ContextOptions,
    ContextResult,
    OverviewOptions,
    OverviewResult,
)
from copilot_cli.context.overview import overview_lines
from copilot_cli.context.render import (
    file_sep_token,
    render_block,
    render_overview,
    snippet_ids,
)
from copilot_cli.context.select import Request, choose
from copilot_cli.core.errors import InputError
from copilot_cli.core.fingerprints import tokenizer_fingerprint
from copilot_cli.core.heap import paused_gc
from copilot_cli.core.models import default_model, load_tokenizer
from copilot_cli.core.options import OptionError
from copilot_cli.core.syntax import EXTENSIONS


@dataclass
class ContextSession:
    """One repository's chunks and index with the tokenizer that counts them."""

    tokenizer: Any
    header: ChunksHeader
    registry: Registry | None
    index: ContextIndex

    @property
    def fingerprints(self) -> dict[str, str]:
        return {
            "tokenizer_fingerprint": self.header.tokenizer_fingerprint,
            "chunks_digest": self.header.digest,
            "registry_digest": self.registry.digest if self.registry else "",
        }

    def select(self, options: ContextOptions) -> ContextResult:
        started = time.perf_counter()
        request = _request(options, self.index)
        separator = self.index.memo("separator", lambda: file_sep_token(self.tokenizer))
        fmt = options.format if options.format != "auto" else "file-sep" if separator else "xml"
        separator = separator or "<|file_sep|>"
        header = render_block([(request.file or "x", "")], fmt, separator)
        smallest = len(snippet_ids(self.tokenizer, header, fmt, separator))
        if options.budget < smallest:
            raise OptionError(
                "budget",
                f"{options.budget} tokens cannot hold one snippet's header ({smallest} tokens)",
            )
        snippets, text, tokens, candidates = choose(
            self.index, request, self.tokenizer, options.budget, fmt, separator, options.unit
        )
        return ContextResult(
            file=request.file,
            budget=options.budget,
            format=fmt,
            snippets=snippets,
            text=text,
            tokens=tokens,
            candidates=candidates,
            seconds=time.perf_counter() - started,
            fingerprints=self.fingerprints,
        )

    def overview(self, options: OverviewOptions) -> OverviewResult:
        lines, entries = overview_lines(
            self.index, self.registry, options.top, options.budget, self.tokenizer
        )
        text = render_overview(lines)
        return OverviewResult(
            text=text,
            tokens=_count(self.tokenizer, text),
            entries=entries,
            fingerprints=self.fingerprints,
        )


def _count(tokenizer: Any, text: str) -> int:
    return len(tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids)


def _tokenizer_of(loaded: Any, name: str | None) -> Any:
    if loaded is not None:
        return getattr(loaded, "tokenizer", loaded)

    return load_tokenizer(name or default_model())


def open_session(
    chunks: Path, registry: Path | None, tokenizer: Any = None, tokenizer_name: str | None = None
) -> ContextSession:
    """Read and check the chunks file and registry (digests, format, tokenizer) and load or
    build their index."""
    tokenizer = _tokenizer_of(tokenizer, tokenizer_name)
    fp = tokenizer_fingerprint(tokenizer)
    with paused_gc():  # millions of records and index entries, none of them garbage
        read, reg = read_pair(Path(chunks), registry and Path(registry), tokenizer_fingerprint=fp)
        index = load_index(read.header, read.chunks, reg)
    return ContextSession(tokenizer, read.header, reg, index)


def select_context(options: ContextOptions, loaded: Any = None) -> ContextResult:
    """Chunks for one request (file + cursor), packed into `options.budget` tokens exactly.
    `loaded`: a ContextSession (many requests, one load), a LoadedModel or a tokenizer."""
    if isinstance(loaded, ContextSession):
        return loaded.select(options)
    session = open_session(options.chunks, options.registry, loaded, options.tokenizer)
    return session.select(options)


def repository_overview(options: OverviewOptions, loaded: Any = None) -> OverviewResult:
    """The repository's most central definitions (signatures, docstring first lines) within
    `options.budget` tokens: static per repository."""
    if not isinstance(loaded, ContextSession):
        loaded = open_session(options.chunks, options.registry, loaded, options.tokenizer)
    return loaded.overview(options)


def _request(options: ContextOptions, index: ContextIndex) -> Request:
    if options.text is not None:
        prefix, suffix = split_at_cursor(options.text, options.cursor)
    else:
        prefix, suffix = options.prefix or "", options.suffix
    language = index.language_of.get(options.file)
    if language is None:
        language = EXTENSIONS.get(PurePosixPath(options.file).suffix)
    return Request(options.file, prefix, suffix, language)


def split_at_cursor(text: str, cursor: tuple[int, int | None] | None) -> tuple[str, str]:
    line, column = cursor or (1, None)
    lines = text.split("\n")
    if line > len(lines):
        raise InputError(
            f"line {line} is past the end of the file ({len(lines)} lines)", where="cursor"
        )
    width = len(lines[line - 1])
    if column is not None and column > width + 1:
        raise InputError(
            f"column {column} is past the end of line {line} ({width})", where="cursor"
        )
    offset = sum(len(x) + 1 for x in lines[: line - 1]) + (column - 1 if column else 0)
    return text[:offset], text[offset:]
