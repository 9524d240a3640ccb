"""The prompt bundle: format, writing helpers, and the runtime loader (`load_bundle`).

Layout of a bundle folder:

    manifest.json          format name/version, environment options, every template's entry
    code/<sha256>.py       Jinja2's generated Python for each template and part (by content)

Loading a bundle never parses a template source: each template's generated code is compiled
by Python and wrapped with `Template.from_code`, on first use, and kept in an LRU keyed by the
template's content hash.
"""

from __future__ import annotations

import contextlib
import functools
import marshal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import jsonschema

from copilot_cli.core.artifacts import read_json_artifact, sha256_bytes, sha256_text, write_bytes
from copilot_cli.core.errors import ArtifactError, InputError
from copilot_cli.core.fingerprints import cache_dir
from copilot_cli.prompts.chat import chat_environment, chat_variables, split_messages
from copilot_cli.prompts.errors import InputsError, TemplateError
from copilot_cli.prompts.sandbox import bounded_render, make_environment

FORMAT = "copilot-opt.prompt-bundle"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
CODE_DIR = "code"
CHAT_TEMPLATE_UNIT = "__chat_template__"


@dataclass(frozen=True)
class RenderedPrompt:
    """A rendered prompt split at its template's static prefix."""

    text: str
    static_prefix: str

    @property
    def rest(self) -> str:
        return self.text[len(self.static_prefix) :]


class _CodeLoader(jinja2.BaseLoader):
    """Serves templates from precompiled code; never sees a template source."""

    def __init__(self, sources: Mapping[str, str]) -> None:
        self.sources = dict(sources)

    def load(
        self, environment: jinja2.Environment, name: str, globals: Any = None
    ) -> jinja2.Template:
        try:
            source = self.sources[name]
        except KeyError:
            raise jinja2.TemplateNotFound(name) from None
        code = cached_code(source, name)
        return environment.template_class.from_code(
            environment, code, environment.make_globals(globals), lambda: True
        )


def _code_cache_dir() -> Path:
    return cache_dir() / "template-code"


def cached_code(source: str, name: str) -> Any:
    """The code object of generated template code, via an on-disk cache like __pycache__.

    Keyed by the source's sha256 and the interpreter's cache tag, so an entry can never be
    stale; the cache is an accelerator outside the bundle (bundles stay byte-identical).
    """
    key = f"{sha256_text(source)}.{sys.implementation.cache_tag}.marshal"
    path = _code_cache_dir() / key
    with contextlib.suppress(OSError, ValueError, EOFError, TypeError):
        return marshal.loads(path.read_bytes())
    code = compile(source, name, "exec")
    with contextlib.suppress(OSError):
        write_bytes(path, marshal.dumps(code))
    return code


def json_path(error: jsonschema.ValidationError) -> str:
    """`$.a[2].b` for a validation error's location."""
    text = "$"
    for part in error.absolute_path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def make_validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def with_defaults(schema: dict[str, Any], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """`inputs` plus the schema's top-level `default` values for properties not given."""
    values = dict(inputs)
    for key, spec in (schema.get("properties") or {}).items():
        if key not in values and isinstance(spec, dict) and "default" in spec:
            values[key] = spec["default"]
    return values


def fast_validator(schema: dict[str, Any]) -> Any:
    """A compiled accept-check (fastjsonschema generates Python code for the schema).

    Used as the fast path; on rejection `jsonschema` produces the error with its JSON path.
    Schemas fastjsonschema cannot compile fall back to jsonschema alone.
    """
    import fastjsonschema

    try:
        check = fastjsonschema.compile(schema, use_default=False)
    except Exception:  # unsupported keyword or draft: the slow path still validates
        validator = make_validator(schema)
        return lambda inputs: validator.is_valid(dict(inputs))

    def accepts(inputs: Mapping[str, Any]) -> bool:
        try:
            check(inputs if isinstance(inputs, dict) else dict(inputs))
        except fastjsonschema.JsonSchemaException:
            return False
        return True

    return accepts


def first_schema_error(validator: Any, inputs: Any) -> jsonschema.ValidationError | None:
    errors = list(validator.iter_errors(inputs))
    return jsonschema.exceptions.best_match(errors) if errors else None


class TemplateRuntime:
    """Renders templates from compiled code: shared by the compiler and the bundle loader."""

    def __init__(
        self,
        code_by_name: Mapping[str, str],
        chat: dict[str, Any] | None = None,
        max_output_chars: int | None = None,
    ) -> None:
        self.environment = make_environment(_CodeLoader(code_by_name))
        if max_output_chars:
            self.environment.max_output_chars = max_output_chars
        self.chat = chat
        self._chat_template: jinja2.Template | None = None
        if chat is not None:
            env = chat_environment()
            code = compile(chat["code"], CHAT_TEMPLATE_UNIT, "exec")
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
        variables = chat_variables(self.chat["special_tokens"])
        return self._chat_template.render(messages=messages, **variables)

    def render(self, unit: str, content_hash: str, fmt: str, inputs: dict[str, Any]) -> str:
        body = bounded_render(
            self.template(unit, content_hash), inputs, self.environment.max_output_chars
        )
        if fmt == "chat":
            return self.render_chat(split_messages(body, unit))
        return body


class PromptBundle:
    """A loaded bundle: `render`, `split`, `static_prefix`, `templates`.

    Obtain one with `load_bundle(path)`.
    """

    def __init__(self, path: Path, manifest: dict[str, Any], code: dict[str, str]) -> None:
        self.path = path
        self.manifest = manifest
        self._entries = {entry["name"]: entry for entry in manifest["templates"]}
        self._runtime = TemplateRuntime(code, manifest.get("chat_template"))
        self._validators: dict[str, Any] = {}

    @property
    def tokenizer_fingerprint(self) -> str | None:
        return self.manifest.get("tokenizer_fingerprint")

    def templates(self) -> list[str]:
        """Template names, sorted."""
        return sorted(self._entries)

    def entry(self, name: str) -> dict[str, Any]:
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
        return self.entry(name)["static_prefix"]

    def validate(self, name: str, inputs: Mapping[str, Any]) -> None:
        """Check `inputs` against the template's schema; InputsError carries the JSON path."""
        fast = self._validators.get(name)
        if fast is None:
            fast = self._validators[name] = fast_validator(self.entry(name)["schema"])
        if fast(inputs):
            return
        error = first_schema_error(make_validator(self.entry(name)["schema"]), dict(inputs))
        if error is not None:
            raise InputsError(error.message, path=json_path(error), template=name)

    def render(self, name: str, /, **inputs: Any) -> str:
        """Validate `inputs` and render template `name` to prompt text."""
        self.validate(name, inputs)
        entry = self.entry(name)
        try:
            return self._runtime.render(
                entry["unit"], entry["content_hash"], entry["format"], inputs
            )
        except (jinja2.TemplateError, TypeError, ValueError) as exc:
            raise TemplateError(f"render failed: {exc}", file=entry["source"]) from exc

    def split(self, name: str, /, **inputs: Any) -> RenderedPrompt:
        """Render and split at the static prefix (prefix ids may come from a KV cache)."""
        text = self.render(name, **inputs)
        prefix = self.static_prefix(name)
        if not text.startswith(prefix):
            raise TemplateError(
                "rendered text does not start with the static prefix (bundle and runtime disagree)",
                file=self.entry(name)["source"],
            )
        return RenderedPrompt(text=text, static_prefix=prefix)


def read_manifest(path: Path) -> dict[str, Any]:
    return read_json_artifact(
        path / MANIFEST, fmt=FORMAT, version=FORMAT_VERSION, what="prompt bundle"
    )


def load_bundle(path: Path | str) -> PromptBundle:
    """Load a compiled bundle folder written by `compile-templates`."""
    path = Path(path)
    manifest = read_manifest(path)
    code: dict[str, str] = {}
    units = {**manifest.get("parts", {}), **{t["unit"]: t for t in manifest["templates"]}}
    for unit, entry in units.items():
        file = path / CODE_DIR / entry["code"]
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise ArtifactError(f"missing compiled code for {unit}", where=str(file)) from exc
        if sha256_bytes(data) != entry["code"].removesuffix(".py"):
            raise ArtifactError(
                f"compiled code for {unit} is corrupt (hash mismatch)", where=str(file)
            )
        code[unit] = data.decode("utf-8")
    return PromptBundle(path, manifest, code)
