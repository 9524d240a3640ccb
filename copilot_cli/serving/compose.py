"""One editor request made into the token ids an engine computes: repository context chosen for
it (the chunks and their index loaded once), the template rendered with it, and the prompt cut
into pieces: the template's static prefix (stored KV), then the text between snippets and each
snippet (a stored snippet's KV is placed, never recomputed from scratch), then the rest.

Every piece is tokenized alone, repository text as data (`context.snippet_ids`): the same ids
`prefill-kv --chunks` stored, so a stored snippet's tokens are its snippet's, checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from copilot_cli.context import FILE_SEP_TOKENS, ContextOptions, snippet_text
from copilot_cli.core import lazy
from copilot_cli.core.errors import CopilotError
from copilot_cli.core.options import OptionError
from copilot_cli.core.tokens import prompt_ids
from copilot_cli.kv import chunk_name
from copilot_cli.prompts import completion_inputs, placeholder_inputs
from copilot_cli.serving.protocol import CompletionRequest, RequestError

prefixed = lazy.module("copilot_cli.serving.prefixed")

# the spellings of fill-in-the-middle and repository tokens, by family (a template written
# for one family is text to another's tokenizer)
FIM_SPELLINGS = {
    "Qwen2.5-Coder": ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>",
                      "<|file_sep|>"),
    "StarCoder": ("<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<repo_name>", "<file_sep>"),
    "DeepSeek-Coder": ("<\uff5cfim\u2581begin\uff5c>", "<\uff5cfim\u2581hole\uff5c>",
                       "<\uff5cfim\u2581end\uff5c>"),
    "CodeLlama": ("<PRE>", "<SUF>", "<MID>"),
}  # fmt: skip


@dataclass
class Composed:
    """A request's prompt as pieces (see the module doc) and the snippets it carries."""

    template: str
    prefix_ids: list[int]
    pieces: list[Any]  # list[int] (computed) or serving.prefixed.StoredSnippet (placed)
    tail: list[int]
    snippets: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ids(self) -> list[int]:
        out = list(self.prefix_ids)
        for piece in self.pieces:
            out += piece if isinstance(piece, list) else piece.ids
        return out + self.tail

    @property
    def stored(self) -> list[Any]:
        return [p for p in self.pieces if not isinstance(p, list)]

    def segments(self) -> list[Segment]:
        """The prompt as consecutive segments from position 0 (empty pieces left out)."""
        out: list[Segment] = []
        position = 0
        for piece in [self.prefix_ids, *self.pieces, self.tail]:
            ids = piece if isinstance(piece, list) else piece.ids
            if ids:
                name = None if isinstance(piece, list) else piece.name
                out.append(Segment(position, list(ids), name))
                position += len(ids)
        return out


@dataclass(frozen=True)
class Segment:
    """Tokens at [start, start + len(ids)): a stored snippet's (`stored` names its chunk KV)
    or to compute."""

    start: int
    ids: list[int]
    stored: str | None = None

    @property
    def end(self) -> int:
        return self.start + len(self.ids)


class Composer:
    """The prompt side of the endpoint: one repository's context session, one bundle's
    template, the tokenizer; `compose(request, stored)` per request."""

    def __init__(self, session: Any, bundle: Any, template: str, chunks: Any, budget: int) -> None:
        self.session = session
        self.bundle = bundle
        self.template = template
        self.tokenizer = session.tokenizer
        self.chunks = chunks  # the chunks file: ContextOptions names it
        self.budget = budget
        self.add_special = bundle.entry(template).adds_special_tokens
        header = session.header
        self.repo_name = header.repository or (header.repositories or ("repository",))[0]
        check_fim_spellings(bundle, template, self.tokenizer)

    def compose(
        self, request: CompletionRequest, stored: set[str], *, stored_first: bool = False
    ) -> Composed:
        """The request's prompt; `stored_first` puts the snippets whose KV is stored right
        after the static prefix (an engine that only takes one stored run from position 0:
        vLLM), the others after them, each group in its order."""
        try:
            options = ContextOptions(
                self.chunks,
                None,
                file=request.file,
                prefix=request.prefix,
                suffix=request.suffix,
                budget=request.budget or self.budget,
                unit="chunks" if stored else "lines",  # stored KV serves whole chunks only
            )
            result = self.session.select(options)
        except CopilotError as exc:
            raise RequestError(400, f"context: {exc}") from None
        context = result.context  # what a template's `context` input takes
        context += [
            {"path": e.filename or "editor", "text": e.text.rstrip("\n")} for e in request.extra
        ]
        if stored_first:
            context = _stored_first(context, stored)
        inputs = self._inputs(request, context)
        try:
            rendered = self.bundle.split(self.template, **inputs)
        except CopilotError as exc:
            raise RequestError(400, f"template {self.template}: {exc}") from None
        prefix = prompt_ids(self.tokenizer, rendered.static_prefix, add_special=self.add_special)
        pieces, tail = prefixed.context_pieces(self.tokenizer, rendered.rest, context, stored)
        placed = {p.name for p in pieces if not isinstance(p, list)}
        return Composed(
            template=self.template,
            prefix_ids=prefix,
            pieces=pieces,
            tail=tail,
            snippets=[_described(s, placed) for s in result.snippets],
        )

    def _inputs(self, request: CompletionRequest, context: list[dict[str, str]]) -> dict:

        try:
            return completion_inputs(
                self.bundle, self.template, path=request.file, before=request.prefix,
                after=request.suffix, context=context, repo_name=self.repo_name,
            )  # fmt: skip
        except CopilotError as exc:
            raise RequestError(400, exc.message) from None


def check_fim_spellings(bundle: Any, template: str, tokenizer: Any) -> None:
    """Refuse, with one line, a template that writes fill-in-the-middle or repository tokens
    this tokenizer does not have as single tokens (it would read them as text).

    Raises:
        OptionError: on `template`, naming the model's own spellings where it has some.
    """

    schema = bundle.entry(template).schema
    text = bundle.render(template, **placeholder_inputs(schema))
    vocab = tokenizer.get_vocab()
    spelled = [t for family in FIM_SPELLINGS.values() for t in family if t in text]
    missing = [t for t in spelled if t not in vocab]
    if missing:
        own = [name for name, family in FIM_SPELLINGS.items() if family[0] in vocab]
        hint = f" (this model spells them as {own[0]} does)" if own else ""
        raise OptionError(
            "template",
            f"{template} writes {missing[0]}, which is not one of this model's tokens{hint}: "
            "compile a template with the model's own spellings",
        )


def _described(snippet: Any, placed: set[str]) -> dict[str, Any]:
    return {
        "id": snippet.id,
        "path": snippet.path,
        "start_line": snippet.start_line,
        "end_line": snippet.end_line,
        "tokens": snippet.tokens,
        "reason": snippet.reason,
    }


def _stored_first(context: list[dict[str, str]], stored: set[str]) -> list[dict[str, str]]:

    def is_stored(item: dict[str, str]) -> bool:
        forms = [snippet_text(item["path"], item["text"], "xml")]
        forms += [snippet_text(item["path"], item["text"], "file-sep", s) for s in FILE_SEP_TOKENS]
        return any(chunk_name(form) in stored for form in forms)

    flags = [is_stored(item) for item in context]
    first = [item for item, flag in zip(context, flags, strict=True) if flag]
    return first + [item for item, flag in zip(context, flags, strict=True) if not flag]
