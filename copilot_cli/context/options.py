"""Settings and results of context selection (no torch import: the CLI builds these)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from copilot_cli.core.inputs import repository_name_problem
from copilot_cli.core.options import require, require_count, setting

FORMATS = ("auto", "xml", "file-sep")
UNITS = ("lines", "chunks")
# Weights of the signals in a chunk's score for definition lines (each scaled to [0, 1] first).
WEIGHTS = {"definition": 4.0, "import": 1.5, "lexical": 0.5, "related": 2.0, "rank": 0.3}


@dataclass(frozen=True)
class ContextOptions:
    """What one request needs: the chunks and registry of the repository, the file being edited
    and where the cursor is, and the token budget of the repository context.

    Attributes:
        chunks: the chunks JSONL written by `chunk`.
        registry: its registry (`chunk --registry`); ranks and the reference graph.
        file: the file being edited, as the chunks name it (a path inside the repository);
            its own chunks are never chosen (the prompt already holds the file).
        text: the file's text, split at the cursor into `prefix` and `suffix`; or
        prefix, suffix: the text before and after the cursor, as an editor sends them.
        cursor: (line, column), 1-based; column None = the start of the line.
        budget: tokens of the rendered context block, at most (recounted).
        format: how snippets are rendered: xml (`<snippet path=...>`), file-sep (the
            `<|file_sep|>path` tokens of StarCoder2 / Qwen2.5-Coder), auto (file-sep when the
            tokenizer has the token, else xml).
        unit: what a snippet of similar code is: "lines" (windows of a file's lines, merged
            where they meet: the most like the code at the cursor for the budget) or "chunks"
            (each window widened to the whole chunks it comes from: what stored chunk KV,
            `prefill-kv --chunks`, can serve).
        tokenizer: a model folder, GGUF file or tokenizer folder (default: the default model);
            it must be the one the chunks were made with.
    """

    chunks: Path = setting(
        Path("build/chunks.jsonl"), yaml=False, help="The chunks JSONL (copilot-opt chunk)."
    )
    registry: Path | None = setting(None, yaml=False, help="Its registry JSON.")
    file: str = setting("", yaml=False, help="The file being edited, as the chunks name it.")
    text: str | None = setting(None, yaml=False)
    cursor: tuple[int, int | None] | None = setting(
        None, yaml=False, help="LINE or LINE:COL, 1-based."
    )
    prefix: str | None = setting(None, yaml=False)
    suffix: str = setting("", yaml=False)
    budget: int = setting(1024, help="Tokens of the context block, at most.")
    format: str = setting("auto", help="auto, xml or file-sep (docs/context.md).")
    unit: str = setting(
        "lines", help="lines (windows of lines) or chunks (whole chunks: chunk KV)."
    )
    tokenizer: str | None = None

    def __post_init__(self) -> None:
        require_count(self.budget, "budget", low=1)
        require(
            self.unit in UNITS, "unit", f"unknown unit {self.unit!r}; choose {', '.join(UNITS)}"
        )
        problem = repository_name_problem(self.file) if self.file else None
        require(problem is None, "file", f"{self.file!r} {problem}")
        require(
            self.format in FORMATS,
            "format",
            f"unknown format {self.format!r}; choose {', '.join(FORMATS)}",
        )
        require(
            (self.text is None) != (self.prefix is None),
            "cursor",
            "give the file's text with a cursor, or the text before the cursor (prefix)",
        )
        require(
            self.text is None or self.cursor is not None, "cursor", "a cursor LINE[:COL] is needed"
        )
        if self.cursor is not None:
            require_count(self.cursor[0], "cursor", low=1)
            if self.cursor[1] is not None:
                require_count(self.cursor[1], "cursor", low=1)


@dataclass(frozen=True)
class OverviewOptions:
    """A repository overview: the highest-ranked definitions' signatures (and the first line
    of their docstrings), within `budget` tokens; static per repository, so it can sit right
    after a template's static prefix and be prefilled with it.

    Attributes:
        chunks, registry, tokenizer: as in ContextOptions.
        top: how many of the highest-ranked definitions are considered.
        budget: tokens of the rendered overview block, at most (recounted).
    """

    chunks: Path = setting(Path("build/chunks.jsonl"), yaml=False)
    registry: Path | None = setting(None, yaml=False)
    top: int = setting(40, help="Definitions the overview considers.")
    budget: int = 1024
    tokenizer: str | None = setting(None, yaml=False)

    def __post_init__(self) -> None:
        require_count(self.top, "top", low=1)
        require_count(self.budget, "budget", low=1)


@dataclass
class Chosen:
    """One chosen snippet and why."""

    id: str
    path: str
    start_line: int
    end_line: int
    tokens: int
    score: float
    signals: dict[str, float]
    reason: str
    text: str = field(repr=False)
    # "window": lines of a file; "chunk": a whole chunk; "signatures": definition lines
    kind: str = "chunk"
    chunks: list[str] = field(default_factory=list)  # "signatures": the chunks they come from

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__}


@dataclass
class ContextResult:
    """The chosen snippets (in prompt order: the strongest last, nearest the code), the
    rendered block and its exact token count."""

    file: str
    budget: int
    format: str
    snippets: list[Chosen]
    text: str
    tokens: int
    candidates: int
    seconds: float
    fingerprints: dict[str, str]
    template: str | None = None  # with a bundle: the template rendered around the context
    prompt: str | None = None  # ... and the prompt it gave

    @property
    def context(self) -> list[dict[str, str]]:
        """What a template's `context` input takes."""
        return [{"path": s.path, "text": s.text.rstrip("\n")} for s in self.snippets]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "copilot-opt.context",
            "format_version": 1,
            **self.fingerprints,
            "file": self.file,
            "budget": self.budget,
            "snippet_format": self.format,
            "tokens": self.tokens,
            "candidates": self.candidates,
            "snippets": [s.to_dict() for s in self.snippets],
            "context": self.context,
            "text": self.text,
            **({"template": self.template, "prompt": self.prompt} if self.template else {}),
        }


@dataclass
class OverviewResult:
    text: str
    tokens: int
    entries: list[dict[str, Any]]
    fingerprints: dict[str, str]
    template: str | None = None  # with a bundle: the template whose static text leads
    prefix: str | None = None  # ... its static text + the overview (what is prefilled)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "copilot-opt.repository-overview",
            "format_version": 1,
            **self.fingerprints,
            "tokens": self.tokens,
            "entries": self.entries,
            "text": self.text,
            **({"template": self.template, "prefix": self.prefix} if self.template else {}),
        }
