"""Signatures of names in a chunk's text: the definition line of a name (continuation lines
joined) and the first line of its docstring or leading comment, found by patterns that cover
the languages the chunker parses."""

from __future__ import annotations

import re

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
