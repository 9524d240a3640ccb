"""A repository overview: the signatures of its most central definitions (registry rank), each
with the first line of its docstring or leading comment, within a token budget."""

from __future__ import annotations

import re
from typing import Any

from copilot_cli.context.index import ContextIndex
from copilot_cli.context.render import render_overview

_SIGNATURE_END = re.compile(r"[:{};]\s*$|\)\s*$|=>\s*$")
_DOC = re.compile(
    r'^\s*(?:[rbuRBU]?"""|[rbuRBU]?\'\'\'|///?|/\*\*?|#|\*)\s*(.*?)\s*(?:"""|\'\'\'|\*/)?$'
)
MAX_SIGNATURE_LINES = 4


_KEYWORDS = (
    r"(?:async\s+def|def|class|func|function\*?|fn|struct|enum|trait|interface|type|impl"
    r"|const|let|var|record|union|typedef|namespace|module)"
)


_KEYWORD = re.compile(rf"\b{_KEYWORDS}\s+(?:\([^)]*\)\s*)?")  # (a Go method's receiver)
_BETWEEN = re.compile(r"[\w*&\s]*")  # modifiers and types between the keyword and the name
_WORD = re.compile(r"[A-Za-z_$][\w$]*")
_CALL_LIKE = re.compile(r"^\s*(?:[\w<>\[\],*&:]+\s+)*([A-Za-z_$][\w$]*)\s*\(")
_ASSIGNED = re.compile(r"^\s*[\w$.]*?([A-Za-z_$][\w$]*)\s*=\s*(?:async\s+)?(?:function|\()")


def _after_keyword(line: str, name: str) -> bool:
    for match in _KEYWORD.finditer(line):
        between = _BETWEEN.match(line, match.end())
        if between is not None and name in _WORD.findall(between.group(0)):
            return True
    return False


def _definition_line(lines: list[str], name: str) -> int | None:
    """The line defining `name`: a definition keyword before it; else (methods, C-like
    functions) the name followed by `(` at the start of a statement; else (JavaScript) a
    function assigned to it. Comments are skipped; no pattern is compiled per name."""
    tests = (
        lambda line: _after_keyword(line, name),
        lambda line: (m := _CALL_LIKE.match(line)) is not None and m.group(1) == name,
        lambda line: (m := _ASSIGNED.match(line)) is not None and m.group(1) == name,
    )
    for test in tests:
        for k, line in enumerate(lines):
            if name not in line or line.lstrip().startswith(("#", "//", "*", "/*")):
                continue
            if test(line):
                return k
    return None


def signature_line(text: str, name: str) -> str | None:
    """The signature of `name` in a chunk's text on one line (continuation lines joined)."""
    found = signature(text, name)
    return found[0] if found else None


def signature(text: str, name: str) -> tuple[str, str] | None:
    """(signature, docstring's or leading comment's first line) of `name` in a chunk's text."""
    lines = text.split("\n")
    start = _definition_line(lines, name)
    if start is None:
        return None
    end = start
    while end < min(len(lines) - 1, start + MAX_SIGNATURE_LINES - 1) and not _SIGNATURE_END.search(
        lines[end]
    ):
        end += 1
    sig = " ".join(x.strip() for x in lines[start : end + 1]).rstrip("{").rstrip()
    doc = ""
    after = lines[end + 1].strip() if end + 1 < len(lines) else ""
    before = lines[start - 1].strip() if start > 0 else ""
    for candidate in (after if after.startswith(('"""', "'''", 'r"""')) else "", before):
        match = _DOC.match(candidate) if candidate else None
        if match and match.group(1):
            doc = match.group(1)
            break
    return sig, doc


def overview_lines(
    index: ContextIndex, registry: dict[str, Any] | None, top: int, budget: int, tokenizer: Any
) -> tuple[list[str], list[dict[str, Any]]]:
    """Lines of the overview (most central first) that fit `budget` when rendered (recounted)."""
    position = {cid: i for i, cid in enumerate(index.ids)}
    picked: list[str] = []
    entries: list[dict[str, Any]] = []
    considered = 0
    for entry in (registry or {}).get("chunks", []):
        if considered >= top:
            break
        kinds = [e for e in entry.get("entities", []) if e["kind"] not in ("variable", "import")]
        i = position.get(entry["id"])
        if not kinds or i is None:
            continue
        considered += 1
        for entity in kinds[:3]:
            found = signature(index.texts[i], entity["name"])
            if found is None:
                continue
            sig, doc = found
            line = f"{index.paths[i][0]}: {sig}" + (f"  -- {doc}" if doc else "")
            if line in picked:
                continue
            trial = render_overview([*picked, line])
            if (
                len(tokenizer.backend_tokenizer.encode(trial, add_special_tokens=False).ids)
                > budget
            ):
                continue
            picked.append(line)
            entries.append({"id": entry["id"], "path": index.paths[i][0], "name": entity["name"]})
    return picked, entries
