"""How chosen snippets are written into a prompt: one documented format per kind of model.

xml (any model): a line introducing them, then per snippet
    <snippet path="src/util.py">
    ...the chunk's text...
    </snippet>
file-sep (models with repository-level tokens, StarCoder2 and Qwen2.5-Coder): per snippet
    <|file_sep|>src/util.py        (StarCoder2 spells it <file_sep>)
    ...the chunk's text...
A path is written as XML attribute text in the xml format (`&`, `<`, `>`, `"`, `'` escaped
as Jinja's `e` filter does, so a file named `a" x="1.py` adds no attribute); paths never hold
control characters (the chunker skips such files, the readers refuse them). The repository's
text is data: its token ids are `snippet_ids`, where a special token's spelling is text.
templates/parts/context.j2 and sample_data/fim_templates/repo_completion.j2 render exactly these
strings (tests/context/test_render.py).
"""

from __future__ import annotations

from typing import Any

from markupsafe import escape

from copilot_cli.core.tokens import literal_ids

XML_INTRO = "Code from other files of this repository:\n"
FILE_SEP_TOKENS = ("<|file_sep|>", "<file_sep>")
OVERVIEW_INTRO = "Repository overview (its most used definitions):\n"


def file_sep_token(tokenizer: Any) -> str | None:
    """The tokenizer's repository-level file separator, if it has one as a single token."""
    vocab = tokenizer.get_vocab()
    return next((t for t in FILE_SEP_TOKENS if t in vocab), None)


def snippet_text(path: str, text: str, fmt: str, separator: str = "<|file_sep|>") -> str:
    body = text.rstrip("\n")
    if fmt == "file-sep":
        return f"{separator}{path}\n{body}\n"
    return f'<snippet path="{escape(path)}">\n{body}\n</snippet>\n'


def block_controls(fmt: str, separator: str) -> tuple[str, ...]:
    """The control tokens a rendered block of `fmt` holds (its file separators)."""
    return (separator,) if fmt == "file-sep" else ()


def snippet_ids(
    tokenizer: Any, snippet: str, fmt: str, separator: str = "<|file_sep|>"
) -> list[int]:
    """Token ids of a rendered snippet (or block): its file separator one control id, all
    the rest (path, repository text) data, special-token spellings included."""
    return literal_ids(tokenizer, snippet, block_controls(fmt, separator))


def render_block(
    items: list[tuple[str, str]],
    fmt: str,
    separator: str = "<|file_sep|>",
    *,
    intro_only: bool = False,
) -> str:
    """The context block for (path, text) items in prompt order ("" for none); `intro_only`:
    what the block holds besides its snippets."""
    if intro_only:
        return "" if fmt == "file-sep" else XML_INTRO + "\n"
    if not items:
        return ""
    body = "".join(snippet_text(path, text, fmt, separator) for path, text in items)
    return body if fmt == "file-sep" else XML_INTRO + body + "\n"


def render_overview(lines: list[str]) -> str:
    return OVERVIEW_INTRO + "".join(f"{line}\n" for line in lines) + "\n" if lines else ""
