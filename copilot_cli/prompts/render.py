"""render: one template of a bundle, split at its static prefix, with token counts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from copilot_cli.core.errors import FingerprintMismatch
from copilot_cli.core.fingerprints import tokenizer_fingerprint
from copilot_cli.core.models import default_model, load_tokenizer
from copilot_cli.core.tokens import continuation_ids, prompt_ids
from copilot_cli.prompts.bundle import load_bundle
from copilot_cli.prompts.options import RenderOptions


@dataclass(frozen=True)
class RenderResult:
    template: str
    text: str
    static_prefix: str
    rest: str
    prefix_tokens: int | None = None  # with count_tokens: what a server feeds
    rest_tokens: int | None = None
    total_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {k: v for k, v in data.items() if v is not None or not k.endswith("_tokens")}


def render_template(options: RenderOptions, tokenizer: Any | None = None) -> RenderResult:
    """Render `options.name` with `options.inputs`; with `count_tokens`, count the prefix, rest
    and total tokens the way a server feeds them (the tokenizer must be the bundle's).

    Raises:
        InputsError: the inputs do not match the schema. TemplateError: rendering failed.
        FingerprintMismatch: counting with another tokenizer than the bundle was made for.
    """

    bundle = load_bundle(options.bundle)
    rendered = bundle.split(options.name, **options.inputs)
    result = RenderResult(options.name, rendered.text, rendered.static_prefix, rendered.rest)
    if not options.count_tokens:
        return result
    if tokenizer is None:
        tokenizer = load_tokenizer(
            options.tokenizer or default_model(), allow_download=options.allow_download
        )
    made_for, found = bundle.tokenizer_fingerprint, tokenizer_fingerprint(tokenizer)
    if made_for and made_for != found:
        raise FingerprintMismatch(
            "tokenizer", expected=found, found=made_for, where=str(options.bundle)
        )
    add_special = bundle.entry(options.name).adds_special_tokens
    return replace(
        result,
        prefix_tokens=len(prompt_ids(tokenizer, rendered.static_prefix, add_special=add_special)),
        rest_tokens=len(continuation_ids(tokenizer, rendered.rest)),
        total_tokens=len(prompt_ids(tokenizer, rendered.text, add_special=add_special)),
    )
