"""compile-templates: validate a template folder and write a precompiled bundle, all or nothing."""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes

from copilot_cli import __version__
from copilot_cli.core import progress
from copilot_cli.core.artifacts import (
    FINGERPRINT_SCHEME,
    canonical_json,
    sealed,
    sha256_bytes,
    sha256_text,
    write_if_changed,
)
from copilot_cli.core.errors import ArtifactError, InputError
from copilot_cli.core.fingerprints import tokenizer_fingerprint
from copilot_cli.core.models import default_model, load_tokenizer
from copilot_cli.core.outputs import claim_folder, mark
from copilot_cli.prompts.analysis import input_variables, static_prefix, template_closure
from copilot_cli.prompts.boundary import stable_prefix
from copilot_cli.prompts.bundle import (
    CHAT_TEMPLATE_UNIT,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    SOURCES_DIR,
    TemplateEntry,
    TemplateRuntime,
    compiled_code,
    error_location,
)
from copilot_cli.prompts.chat import chat_environment, prefix_through_chat, split_messages
from copilot_cli.prompts.errors import TemplateError
from copilot_cli.prompts.options import CompileOptions
from copilot_cli.prompts.sandbox import ENV_OPTIONS, make_environment
from copilot_cli.prompts.schema import first_schema_error, json_path, make_validator, with_defaults
from copilot_cli.prompts.source import (
    PARTS_DIR,
    TemplateSource,
    discover,
    parse_template_file,
    read_text,
)

_VOLATILE_TEXT = re.compile(
    r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}:\d{2}(:\d{2})?\b|"
    r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
    re.IGNORECASE,
)


@dataclass
class TemplateReport:
    name: str
    source: str
    status: str  # "compiled" (new or changed) or "unchanged"
    variables: list[str]
    static_prefix_chars: int
    static_prefix_tokens: int | None
    static_prefix_sha256: str
    shortened_chars: int = 0
    warnings: list[str] = field(default_factory=list)


@dataclass
class CompileResult:
    out: Path
    templates: list[TemplateReport]
    parts: list[str]
    files_written: list[str]
    links: dict[str, str] = field(default_factory=dict)  # link -> what was read through it

    @property
    def warnings(self) -> list[str]:
        return [f"{t.source}: {w}" for t in self.templates for w in t.warnings]

    def to_dict(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "templates": [t.__dict__ for t in self.templates],
            "parts": self.parts,
            "files_written": self.files_written,
            "links": self.links,
            "warnings": self.warnings,
        }


class _Units:
    """Template bodies and part files by name, parsed and code-generated once each."""

    def __init__(
        self,
        src: Path,
        templates: list[TemplateSource],
        parts: list[tuple[Path, str]],
        environment: jinja2.Environment,
    ) -> None:
        self.src = src
        self.environment = environment
        self.text: dict[str, str] = {t.rel_path: t.body for t in templates}
        self.line_offset: dict[str, int] = {t.rel_path: t.body_line - 1 for t in templates}
        self.raw: dict[str, bytes] = {t.rel_path: t.raw for t in templates}
        self.part_paths = dict((rel, path) for path, rel in parts)
        self._ast: dict[str, nodes.Template] = {}

    def source(self, name: str, referrer: str | None = None) -> str:
        if name not in self.text:
            if name.split("/")[0] != PARTS_DIR:
                raise TemplateError(
                    f"can only include or extend parts (files under {PARTS_DIR}/), not {name!r}",
                    file=referrer,
                )
            if name not in self.part_paths:
                raise TemplateError(
                    f"included part {name!r} does not exist (or is outside the template folder)",
                    file=referrer,
                )
            raw = self.part_paths[name].read_bytes()
            self.text[name] = read_text(self.part_paths[name], name)
            self.raw[name] = raw
            self.line_offset[name] = 0
        return self.text[name]

    def parse(self, name: str, referrer: str | None = None) -> nodes.Template:
        if name not in self._ast:
            try:
                self._ast[name] = self.environment.parse(self.source(name, referrer), name, name)
            except jinja2.TemplateSyntaxError as exc:
                raise TemplateError(
                    f"syntax error: {exc.message}",
                    file=name,
                    line=(exc.lineno or 1) + self.line_offset.get(name, 0),
                ) from exc
        return self._ast[name]

    def check_compiles(self, name: str) -> None:
        """Generate the unit's code now (errors found there carry a line), warming the cache."""
        self.parse(name)
        try:
            compiled_code(self.environment, self.source(name), name)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(
                exc.message or str(exc),
                file=name,
                line=(exc.lineno or 1) + self.line_offset.get(name, 0),
            ) from exc


def _first_use_line(ast: nodes.Template, variable: str, offset: int) -> int | None:
    for node in ast.find_all(nodes.Name):
        if node.name == variable and node.ctx == "load":
            return node.lineno + offset
    return None


class _Compiler:
    def __init__(self, options: CompileOptions, tokenizer: Any | None) -> None:
        self.options = options
        self.tokenizer = tokenizer
        self.environment = make_environment(limits=options.limits)
        self.tokenizer_fp = tokenizer_fingerprint(tokenizer) if tokenizer is not None else None
        self.links: dict[str, str] = {}

    def load_sources(self) -> tuple[list[TemplateSource], list[tuple[Path, str]]]:
        template_files, part_files = discover(self.options.src, self.links)
        if not template_files:
            raise InputError(
                "no templates (*.j2 files outside parts/) found", where=str(self.options.src)
            )
        sources = [parse_template_file(path, rel) for path, rel in template_files]
        seen: dict[str, str] = {}
        for source in sources:
            if source.name in seen:
                raise TemplateError(
                    f"template name {source.name!r} is also used by {seen[source.name]}",
                    file=source.rel_path,
                )
            seen[source.name] = source.rel_path
        return sources, part_files

    def chat_info(self, sources: list[TemplateSource]) -> dict[str, Any] | None:
        if not any(s.format == "chat" for s in sources):
            return None
        first = next(s for s in sources if s.format == "chat")
        template = getattr(self.tokenizer, "chat_template", None) if self.tokenizer else None
        if not isinstance(template, str) or not template:
            raise TemplateError(
                "format: chat needs a tokenizer with a chat template (--model or --tokenizer)",
                file=first.rel_path,
            )
        special = {k: v for k, v in self.tokenizer.special_tokens_map.items() if isinstance(v, str)}
        compiled_code(chat_environment(self.options.limits), template, CHAT_TEMPLATE_UNIT)
        return {
            "source": template,
            "template_sha256": sha256_text(template),
            "special_tokens": special,
        }

    def content_hash(
        self, source: TemplateSource, closure: list[str], units: _Units, chat: dict[str, Any] | None
    ) -> str:
        return sha256_text(
            canonical_json(
                {
                    "format_version": FORMAT_VERSION,
                    "source": sha256_bytes(source.raw),
                    "parts": {name: sha256_bytes(units.raw[name]) for name in closure},
                    "environment": ENV_OPTIONS,
                    "limits": self.options.limits.__dict__,
                    "jinja2": jinja2.__version__,
                    "tokenizer": self.tokenizer_fp,
                    "chat_template": chat["template_sha256"]
                    if chat and source.format == "chat"
                    else None,
                    "min_prefix_tokens": self.options.min_prefix_tokens,
                }
            )
        )

    def check_variables(self, source: TemplateSource, units: _Units) -> tuple[list[str], list[str]]:
        used = input_variables(source.rel_path, units.parse, set(self.environment.globals))
        declared = set((source.schema.get("properties") or {}).keys())
        undeclared = sorted(used - declared)
        if undeclared:
            line = _first_use_line(
                units.parse(source.rel_path), undeclared[0], units.line_offset[source.rel_path]
            )
            raise TemplateError(
                f"variable {undeclared[0]!r} is used but not declared in 'inputs'",
                file=source.rel_path,
                line=line,
            )
        unused = sorted(declared - used)
        warnings = [f"input {name!r} is declared but never used" for name in unused]
        return sorted(used), warnings

    def render_samples(
        self, source: TemplateSource, runtime: TemplateRuntime, units: _Units
    ) -> list[str]:
        validator = make_validator(source.schema)
        renders = []
        for index, sample in enumerate(source.samples):
            error = first_schema_error(validator, sample)
            if error is not None:
                path = json_path(error).replace("$", f"samples[{index}]", 1)
                raise TemplateError(f"{path}: {error.message}", file=source.rel_path)
            try:
                values = with_defaults(source.schema, sample)
                renders.append(runtime.render(source.rel_path, "", source.format, values))
            except TemplateError:
                raise
            except Exception as exc:  # any render failure is the template's fault
                unit, line = error_location(exc, units.line_offset, source.rel_path)
                raise TemplateError(
                    f"samples[{index}] fails to render: {type(exc).__name__}: {exc}",
                    file=unit,
                    line=line,
                ) from exc
        return renders

    def prefix(
        self, source: TemplateSource, units: _Units, runtime: TemplateRuntime, renders: list[str]
    ) -> tuple[str, dict[str, Any], list[str]]:
        found = static_prefix(source.rel_path, self.environment, units.parse)
        prefix, warnings = found.text, []
        if source.format == "chat":
            prefix = prefix_through_chat(prefix, runtime.render_chat, source.rel_path)
        for text in renders:
            if not text.startswith(prefix):
                common = 0
                while common < min(len(text), len(prefix)) and text[common] == prefix[common]:
                    common += 1
                warnings.append(
                    f"a sample render departs from the derived prefix at char "
                    f"{common}; prefix shortened"
                )
                prefix = prefix[:common]
        info: dict[str, Any] = {"stopped_at": found.stopped_at, "derived_chars": len(prefix)}
        if found.volatile or _VOLATILE_TEXT.search(prefix):
            warnings.append(
                "the static prefix holds a volatile value (a date, time, id or "
                "random value): every change invalidates its cached KV"
            )
        if self.tokenizer is not None:
            stable, ids = stable_prefix(
                self.tokenizer, prefix, renders, add_special=source.format == "text"
            )
            info["shortened_chars"] = len(prefix) - len(stable)
            prefix = stable
            info["tokens"] = len(ids)
            if len(ids) < self.options.min_prefix_tokens:
                warnings.append(
                    f"static prefix is only {len(ids)} tokens (< "
                    f"{self.options.min_prefix_tokens}): little to cache"
                )
        if not source.samples:
            warnings.append("no samples: the template was not rendered at compile time")
        return prefix, info, warnings

    def entry(
        self,
        source: TemplateSource,
        units: _Units,
        runtime: TemplateRuntime,
        chat: dict[str, Any] | None,
        previous: dict[str, TemplateEntry],
    ) -> tuple[TemplateEntry, str]:
        """The manifest entry of `source`, reused from `previous` when its hash is unchanged."""
        closure = template_closure(source.rel_path, units.parse)
        variables, var_warnings = self.check_variables(source, units)
        content_hash = self.content_hash(source, closure, units, chat)
        old = previous.get(source.name)
        if old and old.content_hash == content_hash and old.unit == source.rel_path:
            return old, "unchanged"
        renders = self.render_samples(source, runtime, units)
        if source.format == "chat":
            bodies = [
                runtime.render_body(source.rel_path, content_hash, with_defaults(source.schema, s))
                for s in source.samples
            ]
            self.check_chat(source, runtime, units, bodies)
        prefix, info, warnings = self.prefix(source, units, runtime, renders)
        return TemplateEntry(
            name=source.name,
            unit=source.rel_path,
            source=source.rel_path,
            description=source.description,
            version=source.version,
            format=source.format,
            content_hash=content_hash,
            source_sha256=sha256_bytes(source.raw),
            unit_sha256=sha256_text(units.source(source.rel_path)),
            body_line=source.body_line,
            parts=tuple(closure),
            variables=tuple(variables),
            schema=source.schema,
            samples=len(source.samples),
            sample_render_sha256=tuple(sha256_text(r) for r in renders),
            static_prefix=prefix,
            static_prefix_sha256=sha256_text(prefix),
            static_prefix_tokens=info.get("tokens"),
            static_prefix_stopped_at=info["stopped_at"],
            static_prefix_shortened_chars=info.get("shortened_chars", 0),
            tokenizer_fingerprint=self.tokenizer_fp,
            warnings=tuple(var_warnings + warnings),
        ), "compiled"

    def check_chat(
        self,
        source: TemplateSource,
        runtime: TemplateRuntime,
        units: _Units,
        samples_bodies: list[str],
    ) -> None:
        for index, body in enumerate(samples_bodies):
            messages = split_messages(body, source.rel_path)
            ours = runtime.render_chat(messages)
            theirs = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
            if ours != theirs:
                raise TemplateError(
                    f"samples[{index}]: the bundled chat template renders "
                    "differently from tokenizer.apply_chat_template",
                    file=source.rel_path,
                )


def _previous_entries(out: Path) -> dict[str, TemplateEntry]:
    """The entries of the bundle being replaced, to reuse where unchanged: only sound ones
    (typed, their static prefix matching its hash); anything else is compiled again."""

    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        return {}
    found = {}
    for raw in manifest.get("templates", []) if isinstance(manifest, dict) else []:
        with contextlib.suppress(ArtifactError):
            entry = TemplateEntry.from_dict(raw, str(out / MANIFEST))
            if sha256_text(entry.static_prefix) == entry.static_prefix_sha256:
                found[entry.name] = entry
    return found


def compile_templates(options: CompileOptions, tokenizer: Any | None = None) -> CompileResult:
    """Validate every template under `options.src` and write the bundle to `options.out`.

    All or nothing: any failure raises before a single file in `out` changes. Templates whose
    content hash (own source, parts, environment, tokenizer) is unchanged are not recomputed,
    and files whose bytes are unchanged are not rewritten. Loads `options.tokenizer` when none
    is handed in (unless `use_tokenizer` is off).

    Raises:
        TemplateError: a template is malformed, unsafe, uses an undeclared variable, or one of
            its samples fails to validate or render (with file:line where known).
        InputError: the folder is missing or holds no template.
    """
    claim_folder(options.out, "out", fmt=FORMAT, manifest=MANIFEST, label="prompt bundle")
    if tokenizer is None and options.use_tokenizer:
        with progress.progress("loading tokenizer"):
            tokenizer = load_tokenizer(
                options.tokenizer or default_model(), allow_download=options.allow_download
            )
    compiler = _Compiler(options, tokenizer)
    sources, part_files = compiler.load_sources()
    units = _Units(options.src, sources, part_files, compiler.environment)
    chat = compiler.chat_info(sources)
    previous = _previous_entries(options.out)
    for _, rel in part_files:  # every part must compile, used or not
        units.parse(rel)
    all_units = [*units.part_paths, *(source.rel_path for source in sources)]
    for rel in all_units:
        units.check_compiles(rel)
    text_by_unit = {rel: units.source(rel) for rel in all_units}
    runtime = TemplateRuntime(text_by_unit, chat, options.limits)
    entries, reports = [], []
    with progress.progress("compiling templates"):
        for source in sources:
            entry, status = compiler.entry(source, units, runtime, chat, previous)
            entries.append(entry)
            reports.append(_template_report(entry, status))
    manifest = _manifest(options, compiler, chat, units, text_by_unit, entries)
    written = _write_bundle(options.out, text_by_unit, sealed(manifest))
    return CompileResult(
        out=options.out,
        templates=sorted(reports, key=lambda r: r.name),
        parts=sorted(units.part_paths),
        files_written=written,
        links=dict(sorted(compiler.links.items())),
    )


def _template_report(entry: TemplateEntry, status: str) -> TemplateReport:
    return TemplateReport(
        name=entry.name,
        source=entry.source,
        status=status,
        variables=list(entry.variables),
        static_prefix_chars=len(entry.static_prefix),
        static_prefix_tokens=entry.static_prefix_tokens,
        static_prefix_sha256=entry.static_prefix_sha256,
        shortened_chars=entry.static_prefix_shortened_chars,
        warnings=list(entry.warnings),
    )


def _manifest(
    options: CompileOptions,
    compiler: _Compiler,
    chat: dict[str, Any] | None,
    units: _Units,
    text_by_unit: dict[str, str],
    entries: list[TemplateEntry],
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "copilot_opt_version": __version__,
        "jinja2_version": jinja2.__version__,
        "environment": ENV_OPTIONS,
        "limits": options.limits.__dict__,
        "tokenizer_fingerprint": compiler.tokenizer_fp,
        "fingerprint_scheme": FINGERPRINT_SCHEME,
        "chat_template": chat,
        "parts": {
            rel: {
                "unit_sha256": sha256_text(text_by_unit[rel]),
                "source_sha256": sha256_bytes(
                    units.raw.get(rel) or units.part_paths[rel].read_bytes()
                ),
            }
            for rel in sorted(units.part_paths)
        },
        "templates": [e.to_dict() for e in sorted(entries, key=lambda e: e.name)],
    }


def _write_bundle(out: Path, text_by_unit: dict[str, str], manifest: dict[str, Any]) -> list[str]:
    """Sources first (content-addressed), manifest last, then drop unreferenced sources.

    A bundle written by an older version (its code/ folder) is removed with the old manifest
    replaced: this version never reads code from a bundle.
    """
    written = []
    mark(out, FORMAT)
    sources_dir = out / SOURCES_DIR
    wanted = set()
    for text in text_by_unit.values():
        name = sha256_text(text) + ".j2"
        wanted.add(name)
        if write_if_changed(sources_dir / name, text.encode("utf-8")):
            written.append(f"{SOURCES_DIR}/{name}")
    if write_if_changed(out / MANIFEST, canonical_json(manifest).encode("utf-8")):
        written.append(MANIFEST)
    for stale in sorted(sources_dir.glob("*.j2")):
        if stale.name not in wanted:
            stale.unlink()
    legacy = out / "code"
    if legacy.is_dir():
        for stale in legacy.glob("*.py"):
            stale.unlink()
        with contextlib.suppress(OSError):
            legacy.rmdir()
    return written
