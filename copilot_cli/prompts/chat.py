"""`format: chat` templates: the body renders messages; the tokenizer's chat template makes text.

In a chat template body each message starts with a marker line `<|message:ROLE|>` (ROLE is
system, user or assistant); the message's content is everything up to the next marker, less
the one newline that ends it. The target tokenizer's own chat template then turns the messages
into the prompt text (with the generation prompt added).

The tokenizer's chat template is stored in the bundle as source and compiled with the settings
transformers uses (sandboxed, trim_blocks, lstrip_blocks, loop controls) plus the same work
bounds as every template; it is checked at compile time against
`tokenizer.apply_chat_template` on every sample, so a bundle renders chat prompts without
loading a tokenizer.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jinja2
from jinja2.ext import loopcontrols

from copilot_cli.prompts.errors import TemplateError
from copilot_cli.prompts.limits import RenderLimits
from copilot_cli.prompts.sandbox import MAX_JSON_INDENT, BoundedSandbox

MARKER = re.compile(r"^<\|message:(system|user|assistant)\|>\n", re.MULTILINE)
SENTINEL = "\ue000\ue001"  # private-use characters: never in real prompt text


def split_messages(text: str, where: str) -> list[dict[str, str]]:
    """Messages from a rendered chat body."""
    markers = list(MARKER.finditer(text))
    if not markers:
        raise TemplateError(
            "a chat template must start its messages with '<|message:ROLE|>' lines", file=where
        )
    if text[: markers[0].start()].strip():
        raise TemplateError("text before the first '<|message:ROLE|>' line", file=where)
    messages = []
    for index, marker in enumerate(markers):
        end = markers[index + 1].start() if index + 1 < len(markers) else len(text)
        content = text[marker.end() : end]
        messages.append({"role": marker.group(1), "content": content.removesuffix("\n")})
    return messages


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    if indent is not None and not (isinstance(indent, int) and 0 <= indent <= MAX_JSON_INDENT):
        raise jinja2.exceptions.SecurityError(f"tojson indent must be in [0, {MAX_JSON_INDENT}]")
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise(message: str) -> None:
    raise jinja2.TemplateError(message)


def chat_environment(limits: RenderLimits | None = None) -> BoundedSandbox:
    """An environment configured the way transformers renders chat templates, with bounds."""
    env = BoundedSandbox(
        limits=limits, trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.policies["json.dumps_function"] = _tojson
    env.globals["raise_exception"] = _raise
    return env


def chat_variables(special_tokens: dict[str, str]) -> dict[str, Any]:
    return {**special_tokens, "add_generation_prompt": True, "tools": None, "documents": None}


def prefix_through_chat(static_body: str, render_chat: Any, where: str) -> str:
    """The prompt-text prefix implied by a static chat body prefix.

    Renders the messages of `static_body` + a sentinel through the chat template and keeps the
    text before the sentinel. Falls back to "" when the static part holds no whole marker.
    """
    if not MARKER.search(static_body):
        return ""
    cut = static_body
    tail = cut[cut.rfind("\n") + 1 :]
    if tail.startswith("<|") and not MARKER.match(tail + "\n"):
        cut = cut[: len(cut) - len(tail)]  # do not end inside a marker line
    text = render_chat(split_messages(cut + SENTINEL, where))
    index = text.find(SENTINEL)
    return text[:index] if index >= 0 else ""
