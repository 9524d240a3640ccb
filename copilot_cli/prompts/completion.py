"""A template filled for one completion request, in one place for every caller (`context
--bundle`, `serve`, `build`, chunk KV's marker): the inputs a template takes (the file's language
and path, the text around the cursor, the chosen context, the repository's name), the smallest
valid inputs of a schema, and a template's static text followed by a repository overview."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from copilot_cli.core.errors import InputError
from copilot_cli.core.syntax import EXTENSIONS
from copilot_cli.prompts.bundle import PromptBundle, load_bundle

# a grammar's name where templates name the language otherwise
_TEMPLATE_LANGUAGE = {"tsx": "typescript"}
UNKNOWN = "text"  # the language of a file whose extension names none


def language_of(path: str, schema: Mapping[str, Any], template: str) -> str:
    """The language a template is told for `path`: from its extension; where the template
    lists the languages it takes, one of them (a file of no known language, such as an editor's
    untitled buffer, gets the first listed).

    Raises:
        InputError: the file's language is known and the template does not take it.
    """
    grammar = EXTENSIONS.get(PurePosixPath(path).suffix)
    language = _TEMPLATE_LANGUAGE.get(grammar, grammar) if grammar else UNKNOWN
    allowed = schema.get("properties", {}).get("language", {}).get("enum")
    if allowed and language not in allowed:
        if grammar is None:
            return allowed[0]
        raise InputError(f"template {template} takes no {language} file", where=path)
    return language


def completion_inputs(
    bundle: PromptBundle,
    template: str,
    *,
    path: str,
    before: str,
    after: str,
    context: list[dict[str, str]],
    repo_name: str | None = None,
) -> dict[str, Any]:
    """The inputs of `template` for a request at `path` (only those the template declares)."""
    schema = bundle.entry(template).schema
    wanted = set(schema.get("properties", {}))
    values: dict[str, Any] = {
        "path": path or "untitled",
        "code_before": before,
        "code_after": after,
        "context": context,
    }
    if "language" in wanted:
        values["language"] = language_of(path, schema, template)
    if repo_name is not None:
        values["repo_name"] = repo_name
    return {k: v for k, v in values.items() if k in wanted}


def placeholder_inputs(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The smallest valid value of each required input (what follows the overview does not
    matter: only the text before it is kept)."""
    empty = {"array": [], "object": {}, "number": 0, "integer": 0, "boolean": False}
    out: dict[str, Any] = {}
    for name in schema.get("required", []):
        spec = schema["properties"].get(name, {})
        out[name] = spec["enum"][0] if "enum" in spec else empty.get(spec.get("type"), "x")
    return out


def overview_prefix(bundle: PromptBundle | Path, template: str, overview: str) -> str:
    """The template's static text followed by the overview: the static prefix of every prompt
    of this (template, repository), to prefill (prefill-kv --text). `bundle`: loaded, or its
    folder."""
    if not isinstance(bundle, PromptBundle):
        bundle = load_bundle(bundle)
    schema = bundle.entry(template).schema
    if "overview" not in schema.get("properties", {}):
        raise InputError("this template takes no overview input", where=template)
    full = bundle.render(template, **{**placeholder_inputs(schema), "overview": overview})
    cut = full.find(overview, len(bundle.static_prefix(template)) - 1)
    if not overview.strip() or cut < 0:
        raise InputError("the overview is empty or not rendered", where=template)
    # end at the overview's last visible character: whitespace merges with what follows it
    # into other tokens, so a prefix ending in whitespace would not be a token prefix
    return full[: cut + len(overview.rstrip())]
