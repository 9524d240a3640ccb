"""Requests as the CLI gives them, typed once: a file on disk with a cursor, or an editor's
prefix/suffix (`ContextRequest`), from flags or from one JSON object per line of a batch; each
answered with a `ContextResult`, its `prompt` filled when a bundle and template are given
(prompts.completion renders it)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from copilot_cli import prompts
from copilot_cli.context.options import (
    ContextOptions,
    ContextResult,
    OverviewOptions,
    OverviewResult,
)
from copilot_cli.context.session import ContextSession, split_at_cursor
from copilot_cli.core.errors import InputError
from copilot_cli.core.inputs import read_json_object, read_text, repository_file


def parse_cursor(value: str | None, where: str = "cursor") -> tuple[int, int | None] | None:
    """LINE or LINE:COL (1-based)."""
    if value is None:
        return None
    line, _, column = str(value).partition(":")
    try:
        return int(line), (int(column) if column else None)
    except ValueError:
        raise InputError(f"{value!r} is not LINE or LINE:COL", where=where) from None


def file_text(repo: Path, file: str) -> str:
    """The text of `file` (as the chunks name it) inside the repository folder: never a file
    outside it (absolute, '..', or a symlink that leads out)."""
    return read_text(str(repository_file(repo, file)), "file")


@dataclass(frozen=True)
class ContextRequest:
    """One request: the file being edited and where: a cursor in its text on disk (read under
    the repository folder), or the text before (and after) the cursor as an editor sends it.

    Attributes:
        file: the file being edited, as the chunks name it.
        cursor: LINE or LINE:COL (1-based) in the file on disk; or
        prefix, suffix: the editor's text around the cursor.
        budget: tokens of the context block for this request (None: the command's).
    """

    file: str
    cursor: str | None = None
    prefix: str | None = None
    suffix: str = ""
    budget: int | None = None

    @classmethod
    def from_json(cls, line: Mapping[str, Any]) -> ContextRequest:
        """A batch line ({file, cursor | prefix [, suffix], budget?}), every field checked."""
        file = line.get("file")
        if not isinstance(file, str) or not file:
            raise InputError("needs a 'file' (a path inside the repository)", where="file")
        for name in ("prefix", "suffix"):
            if name in line and not isinstance(line[name], str):
                raise InputError("must be a string", where=name)
        cursor = line.get("cursor")
        if cursor is not None and (isinstance(cursor, bool) or not isinstance(cursor, (str, int))):
            raise InputError("must be LINE or LINE:COL", where="cursor")
        budget = line.get("budget")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
            raise InputError(f"must be an integer, got {budget!r}", where="budget")
        if "prefix" in line:
            return cls(file, None, line["prefix"], line.get("suffix", ""), budget)
        return cls(file, None if cursor is None else str(cursor), None, "", budget)

    @classmethod
    def from_flags(
        cls, file: str, cursor: str | None, prefix_file: Path | None, suffix_file: Path | None
    ) -> ContextRequest:
        """The request `context`'s flags describe: --cursor, or --prefix-file [--suffix-file]
        (read here)."""
        if prefix_file is None:
            return cls(file, cursor)
        prefix = read_text(str(prefix_file), "prefix file")
        suffix = read_text(str(suffix_file), "suffix file") if suffix_file else ""
        return cls(file, None, prefix, suffix)

    def options(self, base: ContextOptions, repo: Path) -> ContextOptions:
        """The selection's options: `base` with this request's file, cursor and budget."""
        budget = base.budget if self.budget is None else self.budget
        if self.prefix is not None:
            return replace(
                base, file=self.file, text=None, cursor=None, prefix=self.prefix,
                suffix=self.suffix, budget=budget,
            )  # fmt: skip
        if self.cursor is None:
            raise InputError("a cursor LINE[:COL] or a prefix is needed", where="cursor")
        return replace(
            base, file=self.file, text=file_text(repo, self.file),
            cursor=parse_cursor(self.cursor), prefix=None, suffix="", budget=budget,
        )  # fmt: skip


def read_requests(path: Path) -> list[dict[str, Any]]:
    lines = []
    for number, raw in enumerate(read_text(str(path), "requests").splitlines(), 1):
        if raw.strip():
            try:
                item = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise InputError(f"line {number}: not JSON ({exc})", where=str(path)) from None
            if not isinstance(item, dict):
                raise InputError(f"line {number}: not an object", where=str(path))
            lines.append(item)
    return lines


@dataclass(frozen=True)
class Rendering:
    """Where a result's prompt is rendered: a compiled bundle and one of its templates (the
    bundle loaded and checked once, however many requests a batch holds)."""

    bundle: Path
    template: str

    @functools.cached_property
    def loaded(self) -> Any:
        return prompts.load_bundle(self.bundle)

    @staticmethod
    def of(bundle: Path | None, template: str | None) -> Rendering | None:
        if (bundle is None) != (template is None):
            raise InputError("give --bundle and --template together", where="--template")
        return None if bundle is None or template is None else Rendering(bundle, template)


def with_prompt(
    result: ContextResult, options: ContextOptions, rendering: Rendering | None
) -> ContextResult:
    """`result` with the template rendered around it: the chosen context and the file around
    the cursor as the template's inputs."""
    if rendering is None:
        return result
    if options.text is not None:
        before, after = split_at_cursor(options.text, options.cursor)
    else:
        before, after = options.prefix or "", options.suffix
    loaded = rendering.loaded
    inputs = prompts.completion_inputs(
        loaded, rendering.template, path=options.file, before=before, after=after,
        context=result.context,
    )  # fmt: skip
    prompt = loaded.render(rendering.template, **inputs)
    return replace(result, template=rendering.template, prompt=prompt)


def run_one(
    session: ContextSession,
    base: ContextOptions,
    request: ContextRequest,
    repo: Path,
    rendering: Rendering | None,
) -> ContextResult:
    """One request from the command line."""
    if not request.file:
        raise InputError("name the file being edited (--file)", where="--file")
    if request.cursor is None and request.prefix is None:
        raise InputError("give --cursor LINE[:COL] or --prefix-file", where="--cursor")
    options = request.options(base, repo)
    return with_prompt(session.select(options), options, rendering)


def run_batch(
    session: ContextSession,
    base: ContextOptions,
    requests: Path,
    repo: Path,
    rendering: Rendering | None,
) -> list[ContextResult]:
    """One result per request line, in order; a bad line stops the batch naming its number."""
    out = []
    for number, line in enumerate(read_requests(requests), 1):
        try:
            options = ContextRequest.from_json(line).options(base, repo)
            result = session.select(options)
        except InputError as exc:
            about = f"{exc.where}: " if exc.where else ""
            raise InputError(
                f"request {number}: {about}{exc.message}", where=str(requests)
            ) from None
        out.append(with_prompt(result, options, rendering))
    return out


def run_static(
    session: ContextSession, options: OverviewOptions, rendering: Rendering | None
) -> OverviewResult:
    """The overview; with a rendering, the template's static text + the overview too (one
    static prefix to prefill)."""
    result = session.overview(options)
    if rendering is None:
        return result
    prefix = prompts.overview_prefix(rendering.loaded, rendering.template, result.text)
    return replace(result, template=rendering.template, prefix=prefix)


def context_inputs(path: Path) -> dict[str, Any]:
    """A template's inputs from a result file of `context`: `context` from a request's result
    (copilot-opt.context), `overview` from an overview's (copilot-opt.repository-overview)."""

    data = read_json_object(path, "context file")
    kind = data.get("format")
    if kind == "copilot-opt.context" and isinstance(data.get("context"), list):
        return {"context": data["context"]}
    if kind == "copilot-opt.repository-overview" and isinstance(data.get("text"), str):
        return {"overview": data["text"]}
    raise InputError(
        "not a result of copilot-opt context (-o request.json, or --static --json)", where=str(path)
    )
