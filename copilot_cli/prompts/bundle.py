"""The prompt bundle: format, the template runtime, and the loader (`load_bundle`).

Layout of a bundle folder (format version 2):

    manifest.json            format name/version, limits, every template's entry, a digest
    sources/<sha256>.j2      the Jinja source of each template body and part (by content)

A bundle holds data only, never code: the loader compiles each source in this package's
sandbox (the same environment compile-templates used) on first use. Compiled code is kept in a
per-machine cache (`COPILOT_OPT_CACHE_DIR`/template-code, keyed by the source and the compiler's
identity), so loading stays fast after the first time, and nothing a bundle carries can run
outside the sandbox, whoever edited it.
"""

from __future__ import annotations

import contextlib
import functools
import marshal
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import CodeType
from typing import Any

import jinja2
import jsonschema

from copilot_cli import __version__
from copilot_cli.core.artifacts import (
    check_sealed,
    read_json_artifact,
    sha256_bytes,
    sha256_text,
    write_bytes,
)
from copilot_cli.core.errors import ArtifactError, InputError
from copilot_cli.core.fingerprints import cache_dir
from copilot_cli.prompts.chat import chat_environment, chat_variables, split_messages
from copilot_cli.prompts.errors import InputsError, TemplateError
from copilot_cli.prompts.sandbox import (
    CODEGEN_VERSION,
    ENV_OPTIONS,
    RenderLimits,
    bounded_render,
    make_environment,
)
from copilot_cli.prompts.schema import fast_validator, first_schema_error, json_path, make_validator
from copilot_cli.prompts.source import template_name_problem

FORMAT = "copilot-opt.prompt-bundle"
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
SOURCES_DIR = "sources"
CHAT_TEMPLATE_UNIT = "__chat_template__"
# A bundle names its own limits; a loader never lets one go past these.
HARD_LIMITS = RenderLimits(
    max_output_chars=100_000_000, max_loop_iterations=100_000_000, max_seconds=60.0
)


@dataclass(frozen=True)
class RenderedPrompt:
    """A rendered prompt split at its template's static prefix."""

    text: str
    static_prefix: str

    @property
    def rest(self) -> str:
        return self.text[len(self.static_prefix) :]


def _code_cache_dir() -> Path:
    return cache_dir() / "template-code"


def compiled_code(environment: jinja2.Environment, source: str, name: str) -> CodeType:
    """The code object of `source` compiled by `environment`, via a per-machine cache.

    The key covers the source, the unit name and everything that shapes the generated code
    (this package's and Jinja's versions, the environment class and options, the guards'
    version, the interpreter), so an entry can never be stale. Bundles never carry code.
    """
    identity = (
        f"{__version__}|{jinja2.__version__}|{CODEGEN_VERSION}|{type(environment).__name__}|"
        f"{sorted(ENV_OPTIONS.items())}|{sys.implementation.cache_tag}|{name}|"
    )
    key = sha256_text(identity + source)
    path = _code_cache_dir() / f"{key}.marshal"
    with contextlib.suppress(OSError, ValueError, EOFError, TypeError):
        code = marshal.loads(path.read_bytes())
        if isinstance(code, CodeType):
            return code
    code = compile(environment.compile(source, name, name, raw=True), name, "exec")
    with contextlib.suppress(OSError):
        write_bytes(path, marshal.dumps(code))
    return code


class _SourceLoader(jinja2.BaseLoader):
    """Serves the bundle's units, compiled by the environment that asks for them."""

    def __init__(self, sources: Mapping[str, str]) -> None:
        self.sources = dict(sources)

    def load(
        self, environment: jinja2.Environment, name: str, globals: Any = None
    ) -> jinja2.Template:
        try:
            source = self.sources[name]
        except KeyError:
            raise jinja2.TemplateNotFound(name) from None
        code = compiled_code(environment, source, name)
        # Jinja hands over globals it already built with make_globals; wrapping them again
        # would nest ChainMaps and slow every variable lookup.
        if globals is None:
            globals = environment.make_globals(None)
        return environment.template_class.from_code(environment, code, globals, lambda: True)


def error_location(
    exc: BaseException, line_offsets: Mapping[str, int], default: str
) -> tuple[str, int | None]:
    """(unit, file line) of the innermost template frame an exception passed through."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename in line_offsets and frame.lineno:
            return frame.filename, frame.lineno + line_offsets[frame.filename]
    return default, None


class TemplateRuntime:
    """Renders templates from their sources: shared by the compiler and the bundle loader."""

    def __init__(
        self,
        sources: Mapping[str, str],
        chat: dict[str, Any] | None = None,
        limits: RenderLimits | None = None,
    ) -> None:
        self.limits = limits or RenderLimits()
        self.environment = make_environment(_SourceLoader(sources), self.limits)
        self.chat = chat
        self._chat_template: jinja2.Template | None = None
        if chat is not None:
            env = chat_environment(self.limits)
            code = compiled_code(env, chat["source"], CHAT_TEMPLATE_UNIT)
            self._chat_template = env.template_class.from_code(
                env, code, env.make_globals(None), lambda: True
            )

    @functools.lru_cache(maxsize=256)  # noqa: B019 - one runtime per bundle, bounded
    def template(self, name: str, content_hash: str) -> jinja2.Template:
        """The compiled template `name`; `content_hash` keys the LRU so edits never go stale."""
        return self.environment.get_template(name)

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        if self._chat_template is None or self.chat is None:
            raise TemplateError("format: chat needs a tokenizer chat template in the bundle")
        variables = {**chat_variables(self.chat["special_tokens"]), "messages": messages}
        return bounded_render(self._chat_template, variables, self.limits)

    def render_body(self, unit: str, content_hash: str, inputs: dict[str, Any]) -> str:
        return bounded_render(self.template(unit, content_hash), inputs, self.limits)

    def render(self, unit: str, content_hash: str, fmt: str, inputs: dict[str, Any]) -> str:
        body = self.render_body(unit, content_hash, inputs)
        if fmt == "chat":
            return self.render_chat(split_messages(body, unit))
        return body


class PromptBundle:
    """A loaded bundle: `render`, `split`, `static_prefix`, `templates`.

    Obtain one with `load_bundle(path)`.
    """

    def __init__(self, path: Path, manifest: dict[str, Any], sources: dict[str, str]) -> None:
        self.path = path
        self.manifest = manifest
        where = str(path / MANIFEST)
        self._entries = {
            entry.name: entry
            for entry in (TemplateEntry.from_dict(e, where) for e in manifest["templates"])
        }
        self._runtime = TemplateRuntime(sources, manifest.get("chat_template"), _limits(manifest))
        self._validators: dict[str, Any] = {}
        self._line_offsets = {unit: 0 for unit in manifest["parts"]}
        for entry in self._entries.values():
            self._line_offsets[entry.unit] = entry.body_line - 1
        self._line_offsets[CHAT_TEMPLATE_UNIT] = 0

    @property
    def tokenizer_fingerprint(self) -> str | None:
        return self.manifest.get("tokenizer_fingerprint")

    def templates(self) -> list[str]:
        """Template names, sorted."""
        return sorted(self._entries)

    def entry(self, name: str) -> TemplateEntry:
        """The manifest entry of template `name`."""
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self.templates())
            raise InputError(
                f"no template named {name!r} (known: {known})", where=str(self.path)
            ) from None

    def static_prefix(self, name: str) -> str:
        """The text every rendering of `name` starts with (cacheable by prefill-kv)."""
        return self.entry(name).static_prefix

    def validate(self, name: str, inputs: Mapping[str, Any]) -> None:
        """Check `inputs` against the template's schema; InputsError carries the JSON path."""
        schema = self.entry(name).schema
        try:
            fast = self._validators.get(name)
            if fast is None:
                fast = self._validators[name] = fast_validator(schema)
            if fast(inputs):
                return
            error = first_schema_error(make_validator(schema), dict(inputs))
        except (jsonschema.SchemaError, TypeError, ValueError, KeyError, RecursionError) as exc:
            raise ArtifactError(
                f"the input schema of {name!r} is malformed ({type(exc).__name__})",
                where=str(self.path / MANIFEST),
            ) from exc
        if error is not None:
            raise InputsError(error.message, path=json_path(error), template=name)

    def render(self, name: str, /, **inputs: Any) -> str:
        """Validate `inputs` and render template `name` to prompt text.

        Raises:
            InputsError: the inputs do not match the template's schema.
            TemplateError: rendering failed or passed a limit (with the file and line).
        """
        self.validate(name, inputs)
        entry = self.entry(name)
        try:
            return self._runtime.render(entry.unit, entry.content_hash, entry.format, inputs)
        except TemplateError:
            raise
        except Exception as exc:  # whatever the template raised is the template's fault
            unit, line = error_location(exc, self._line_offsets, entry.unit)
            raise TemplateError(
                f"render failed: {type(exc).__name__}: {exc}",
                file=entry.source if unit == entry.unit else unit,
                line=line,
            ) from exc

    def split(self, name: str, /, **inputs: Any) -> RenderedPrompt:
        """Render and split at the static prefix (prefix ids may come from a KV cache)."""
        text = self.render(name, **inputs)
        prefix = self.static_prefix(name)
        if not text.startswith(prefix):
            raise TemplateError(
                "rendered text does not start with the static prefix (bundle and runtime disagree)",
                file=self.entry(name).source,
            )
        return RenderedPrompt(text=text, static_prefix=prefix)


def _limits(manifest: dict[str, Any]) -> RenderLimits:
    stored = manifest.get("limits") or {}
    try:
        return RenderLimits(
            max_output_chars=min(stored["max_output_chars"], HARD_LIMITS.max_output_chars),
            max_loop_iterations=min(stored["max_loop_iterations"], HARD_LIMITS.max_loop_iterations),
            max_seconds=min(stored["max_seconds"], HARD_LIMITS.max_seconds),
        )
    except (KeyError, TypeError, ValueError, InputError) as exc:
        raise ArtifactError(f"limits in {MANIFEST} are malformed ({exc})") from exc


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of a bundle folder, its format, version, digest and shape checked."""
    manifest = read_json_artifact(
        path / MANIFEST, fmt=FORMAT, version=FORMAT_VERSION, what="prompt bundle"
    )
    where = str(path / MANIFEST)
    check_sealed(manifest, where=where)
    templates, parts = manifest.get("templates"), manifest.get("parts")
    if not isinstance(templates, list) or not isinstance(parts, dict):
        raise ArtifactError("'templates' must be a list and 'parts' an object", where=where)
    for entry in templates:
        TemplateEntry.from_dict(entry, where)
    if not all(isinstance(entry, dict) for entry in parts.values()):
        raise ArtifactError("a part entry is malformed", where=where)
    chat = manifest.get("chat_template")
    if chat is not None and not (
        isinstance(chat, dict)
        and isinstance(chat.get("source"), str)
        and chat.get("template_sha256") == sha256_text(chat["source"])
        and isinstance(chat.get("special_tokens"), dict)
        and all(isinstance(v, str) for v in chat["special_tokens"].values())
    ):
        raise ArtifactError("the chat template entry is malformed", where=where)
    return manifest


@dataclass(frozen=True)
class TemplateEntry:
    """One template's manifest entry, typed; validated once when a bundle is read
    (`from_dict`), written back as the same JSON (`to_dict`)."""

    name: str
    unit: str
    source: str
    description: str
    version: str
    format: str  # "text" or "chat"
    content_hash: str
    source_sha256: str
    unit_sha256: str
    body_line: int
    parts: tuple[str, ...]
    variables: tuple[str, ...]
    schema: Mapping[str, Any]
    samples: int
    sample_render_sha256: tuple[str, ...]
    static_prefix: str
    static_prefix_sha256: str
    static_prefix_tokens: int | None
    static_prefix_stopped_at: str
    static_prefix_shortened_chars: int
    tokenizer_fingerprint: str | None
    warnings: tuple[str, ...]

    @property
    def adds_special_tokens(self) -> bool:
        """A text template's prompt gets the tokenizer's special tokens (BOS); a chat
        template's rendering already holds them."""
        return self.format == "text"

    @classmethod
    def from_dict(cls, data: Any, where: str) -> TemplateEntry:
        """An entry from its JSON form; ArtifactError names the first bad field."""
        if not isinstance(data, dict):
            raise ArtifactError("a template entry is not an object", where=where)
        label = data.get("name") if isinstance(data.get("name"), str) else "?"
        values = {}
        for name, kind in _ENTRY_FIELDS.items():
            value = data.get(name)
            if not _is(value, kind):
                raise ArtifactError(f"template {label!r}: '{name}' is malformed", where=where)
            values[name] = tuple(value) if isinstance(value, list) else value
        if values["format"] not in ("text", "chat"):
            raise ArtifactError(f"template {label!r}: 'format' is malformed", where=where)
        if problem := template_name_problem(values["name"]):
            raise ArtifactError(f"a template entry's name {problem}", where=where)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in ((n, getattr(self, n)) for n in _ENTRY_FIELDS)
        }


_TEXTS = (list, str)  # a list of strings
_ENTRY_FIELDS: dict[str, Any] = {
    "name": str,
    "unit": str,
    "source": str,
    "description": str,
    "version": str,
    "format": str,
    "content_hash": str,
    "source_sha256": str,
    "unit_sha256": str,
    "body_line": int,
    "parts": _TEXTS,
    "variables": _TEXTS,
    "schema": dict,
    "samples": int,
    "sample_render_sha256": _TEXTS,
    "static_prefix": str,
    "static_prefix_sha256": str,
    "static_prefix_tokens": (int, None),
    "static_prefix_stopped_at": str,
    "static_prefix_shortened_chars": int,
    "tokenizer_fingerprint": (str, None),
    "warnings": _TEXTS,
}


def _is(value: Any, kind: Any) -> bool:
    if kind is _TEXTS:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if isinstance(kind, tuple):  # (type, None): the type or null
        return value is None or _is(value, kind[0])
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


def load_bundle(path: Path | str) -> PromptBundle:
    """Load a compiled bundle folder written by `compile-templates`.

    Every source file is checked against its hash, every static prefix against its hash and
    the manifest against its digest, before anything renders.

    Raises:
        ArtifactError: a missing, edited or corrupt file, or another format version.
    """
    path = Path(path)
    manifest = read_manifest(path)
    sources: dict[str, str] = {}
    units = {**manifest["parts"], **{t["unit"]: t for t in manifest["templates"]}}
    for unit, entry in units.items():
        digest = entry.get("unit_sha256") if isinstance(entry, dict) else None
        if not isinstance(digest, str) or len(digest) != 64:
            raise ArtifactError(f"no source hash for {unit}", where=str(path / MANIFEST))
        file = path / SOURCES_DIR / f"{digest}.j2"
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise ArtifactError(f"missing source of {unit}", where=str(file)) from exc
        if sha256_bytes(data) != digest:
            raise ArtifactError(f"source of {unit} is corrupt (hash mismatch)", where=str(file))
        try:
            sources[unit] = data.decode("utf-8")
        except UnicodeDecodeError as exc:  # hash matches: written so, or resealed
            raise ArtifactError(
                f"source of {unit} is not UTF-8 (byte {exc.start})", where=str(file)
            ) from None
    for entry in manifest["templates"]:
        if sha256_text(entry["static_prefix"]) != entry["static_prefix_sha256"]:
            raise ArtifactError(
                f"static prefix of {entry['name']} does not match its hash",
                where=str(path / MANIFEST),
            )
    return PromptBundle(path, manifest, sources)
