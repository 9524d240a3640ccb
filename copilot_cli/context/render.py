"""How chosen snippets are written into a prompt: one documented format per kind of model.

xml (any model): a line introducing them, then per snippet
    <snippet path="src/util.py">
    ...the chunk's text...
    </snippet>
file-sep (models with repository-level tokens, StarCoder2 and Qwen2.5-Coder): per snippet
    <|file_sep|>src/util.py        (StarCoder2 spells it <file_sep>)
    ...the chunk's text...
templates/parts/context.j2 and sample_data/fim_templates/repo_completion.j2 render exactly these
strings (tests/context/test_render.py).
"""

from __future__ import annotations

from typing import Any

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
    return f'<snippet path="{path}">\n{body}\n</snippet>\n'


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
