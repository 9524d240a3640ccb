"""Requests as the CLI and servers give them: a file on disk with a cursor, or an editor's
prefix/suffix; one JSON object per request in a batch; the chosen context rendered into a
template of a bundle."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from copilot_cli.context.options import ContextOptions, ContextResult, OverviewOptions
from copilot_cli.context.session import ContextSession, split_at_cursor
from copilot_cli.core.errors import InputError
from copilot_cli.core.inputs import read_text, repository_file


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


def request_options(base: ContextOptions, line: dict[str, Any], repo: Path) -> ContextOptions:
    """One batch line ({file, cursor | prefix [, suffix], budget?}) over the base options."""
    file = line.get("file")
    if not isinstance(file, str) or not file:
        raise InputError("needs a 'file' (a path inside the repository)", where="file")
    if "prefix" in line:
        return replace(
            base,
            file=file,
            text=None,
            cursor=None,
            prefix=str(line["prefix"]),
            suffix=str(line.get("suffix", "")),
            budget=line.get("budget", base.budget),
        )
    return replace(
        base,
        file=file,
        text=file_text(repo, file),
        cursor=parse_cursor(line.get("cursor")),
        prefix=None,
        suffix="",
        budget=line.get("budget", base.budget),
    )


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


def template_prompt(
    bundle: Path, template: str, options: ContextOptions, result: ContextResult
) -> str:
    """The template rendered with the chosen context and the file around the cursor (the
    template's own inputs: language, path, code_before, code_after, context)."""
    from copilot_cli.prompts import load_bundle

    loaded = load_bundle(bundle)
    entry = loaded.entry(template)
    wanted = set(entry.schema.get("properties", {}))
    if options.text is not None:
        before, after = split_at_cursor(options.text, options.cursor)
    else:
        before, after = options.prefix or "", options.suffix
    from copilot_cli.core.syntax import EXTENSIONS

    inputs = {
        "language": EXTENSIONS.get(Path(options.file).suffix, "text"),
        "path": options.file,
        "code_before": before,
        "code_after": after,
        "context": result.context,
    }
    return loaded.render(template, **{k: v for k, v in inputs.items() if k in wanted})


def placeholder_inputs(schema: dict[str, Any]) -> dict[str, Any]:
    """The smallest valid value of each required input (what follows the overview does not
    matter: only the text before it is kept)."""
    empty = {"array": [], "object": {}, "number": 0, "integer": 0, "boolean": False}
    out: dict[str, Any] = {}
    for name in schema.get("required", []):
        spec = schema["properties"].get(name, {})
        out[name] = spec["enum"][0] if "enum" in spec else empty.get(spec.get("type"), "x")
    return out


def overview_prefix(bundle: Path, template: str, overview: str) -> str:
    """The template's static text followed by the overview: the static prefix of every prompt
    of this (template, repository), to prefill (prefill-kv --text)."""
    from copilot_cli.prompts import load_bundle

    loaded = load_bundle(bundle)
    entry = loaded.entry(template)
    if "overview" not in entry.schema.get("properties", {}):
        raise InputError("this template takes no overview input", where=template)
    full = loaded.render(template, **{**placeholder_inputs(entry.schema), "overview": overview})
    cut = full.find(overview, len(loaded.static_prefix(template)) - 1)
    if not overview.strip() or cut < 0:
        raise InputError("the overview is empty or not rendered", where=template)
    # end at the overview's last visible character: whitespace merges with what follows it
    # into other tokens, so a prefix ending in whitespace would not be a token prefix
    return full[: cut + len(overview.rstrip())]


def _with_prompt(
    payload: dict[str, Any],
    options: ContextOptions,
    result: ContextResult,
    bundle: Path | None,
    template: str | None,
) -> dict[str, Any]:
    if (bundle is None) != (template is None):
        raise InputError("give --bundle and --template together", where="--template")
    if bundle is not None and template is not None:
        payload["template"] = template
        payload["prompt"] = template_prompt(bundle, template, options, result)
    return payload


def run_one(
    session: ContextSession,
    base: ContextOptions,
    file: str,
    repo: Path,
    cursor: str | None,
    prefix_file: Path | None,
    suffix_file: Path | None,
    bundle: Path | None,
    template: str | None,
) -> tuple[dict[str, Any], None]:
    """One request from the command line: --cursor (the file read under --repo) or
    --prefix-file [--suffix-file]."""
    if not file:
        raise InputError("name the file being edited (--file)", where="--file")
    if prefix_file is not None:
        suffix = read_text(str(suffix_file), "suffix file") if suffix_file else ""
        prefix = read_text(str(prefix_file), "prefix file")
        options = replace(base, file=file, prefix=prefix, suffix=suffix)
    elif cursor is not None:
        options = replace(
            base, file=file, text=file_text(repo, file), cursor=parse_cursor(cursor), prefix=None
        )
    else:
        raise InputError("give --cursor LINE[:COL] or --prefix-file", where="--cursor")
    result = session.select(options)
    return _with_prompt(result.to_dict(), options, result, bundle, template), None


def run_batch(
    session: ContextSession,
    base: ContextOptions,
    requests: Path,
    repo: Path,
    bundle: Path | None,
    template: str | None,
) -> list[dict[str, Any]]:
    """One result per request line, in order; a bad line stops the batch naming its number."""
    out = []
    for number, line in enumerate(read_requests(requests), 1):
        try:
            options = request_options(base, line, repo)
            result = session.select(options)
        except InputError as exc:
            about = f"{exc.where}: " if exc.where else ""
            raise InputError(
                f"request {number}: {about}{exc.message}", where=str(requests)
            ) from None
        out.append(_with_prompt(result.to_dict(), options, result, bundle, template))
    return out


def run_static(
    session: ContextSession, options: OverviewOptions, bundle: Path | None, template: str | None
) -> tuple[dict[str, Any], str]:
    """The overview, and the text to write: the overview, or with --bundle/--template the
    template's static text + the overview (one static prefix to prefill)."""
    result = session.overview(options)
    payload = result.to_dict()
    if (bundle is None) != (template is None):
        raise InputError("give --bundle and --template together", where="--template")
    if bundle is not None and template is not None:
        payload["template"] = template
        payload["prefix"] = overview_prefix(bundle, template, result.text)
        return payload, payload["prefix"]
    return payload, result.text


def context_inputs(path: Path) -> dict[str, Any]:
    """A template's inputs from a result file of `context`: `context` from a request's result
    (copilot-opt.context), `overview` from an overview's (copilot-opt.repository-overview)."""
    from copilot_cli.core.inputs import read_json_object

    data = read_json_object(path, "context file")
    kind = data.get("format")
    if kind == "copilot-opt.context" and isinstance(data.get("context"), list):
        return {"context": data["context"]}
    if kind == "copilot-opt.repository-overview" and isinstance(data.get("text"), str):
        return {"overview": data["text"]}
    raise InputError(
        "not a result of copilot-opt context (-o request.json, or --static --json)", where=str(path)
    )


def overview_prefixes(
    options: OverviewOptions, bundle: Path, folder: Path, tokenizer: Any
) -> tuple[Any, list[Path]]:
    """The overview (folder/overview.json) and, for every template of `bundle` that takes an
    `overview`, its static text + the overview (folder/TEMPLATE.txt): what `build` writes and
    prefills. Returns the overview and the prefix files."""
    import json

    from copilot_cli.context.session import open_session
    from copilot_cli.core.artifacts import write_bytes
    from copilot_cli.core.errors import ArtifactError
    from copilot_cli.prompts import load_bundle

    session = open_session(options.chunks, options.registry, tokenizer)
    result = session.overview(options)
    folder.mkdir(parents=True, exist_ok=True)
    body = json.dumps(result.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    write_bytes(folder / "overview.json", body.encode("utf-8"))
    written = []
    loaded = load_bundle(bundle)
    for name in loaded.templates():
        schema = loaded.entry(name).schema
        if "overview" in schema.get("properties", {}) and result.text:
            path = folder / f"{name}.txt"
            if path.parent != folder:  # names are checked at compile and load; never a path
                raise ArtifactError(f"template name {name!r} is not a file name", where=str(bundle))
            write_bytes(path, overview_prefix(bundle, name, result.text).encode("utf-8"))
            written.append(path)
    return result, written
