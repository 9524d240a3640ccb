"""Code as prune sees it: the part that parses, what may go from it, and the check that it still
parses.

Contexts are usually cut out of a file, so they rarely end where a definition ends. The frame
of a code text is its longest head, cut at a line start, that parses once the brackets (or, for
Python, the block) left open there are closed; what follows the cut (the line being written)
is kept verbatim. Everything prune removes comes from the head. Every removal of a whole
statement is checked by parsing the segment it lies in (a top-level definition, or a member of
a large one, with the headers and footers around it), so the checks cost what the segment
costs, not what the file costs; the pruner checks the whole head once at the end.
"""

from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from copilot_cli.core.syntax import parse_clean, parser_for, parses

# languages tried, in order, when a text comes without one
DETECT = ("python", "go", "rust", "typescript", "javascript", "java", "cpp", "c")
# top-level node types that show a text is code in that language (not prose that happens to
# parse): definitions, imports, declarations
CODE_KINDS = {
    "python": {
        "function_definition",
        "class_definition",
        "decorated_definition",
        "import_statement",
        "import_from_statement",
        "if_statement",
        "for_statement",
        "while_statement",
        "return_statement",
    },
    "go": {
        "package_clause",
        "import_declaration",
        "function_declaration",
        "method_declaration",
        "type_declaration",
    },
    "rust": {
        "use_declaration",
        "function_item",
        "struct_item",
        "enum_item",
        "impl_item",
        "trait_item",
        "mod_item",
    },
    "typescript": {
        "import_statement",
        "export_statement",
        "function_declaration",
        "class_declaration",
        "interface_declaration",
        "type_alias_declaration",
        "lexical_declaration",
    },
    "javascript": {
        "import_statement",
        "export_statement",
        "function_declaration",
        "class_declaration",
        "lexical_declaration",
    },
    "java": {"package_declaration", "import_declaration", "class_declaration"},
    "cpp": {"preproc_include", "function_definition", "class_specifier", "namespace_definition"},
    "c": {"preproc_include", "function_definition", "struct_specifier"},
}
COMMENT_TYPES = {"comment", "line_comment", "block_comment", "documentation_comment"}
STRING_CONTENT_TYPES = {"string_content", "string_fragment", "interpreted_string_literal_content"}
_CANDIDATE_CUTS = 40  # line starts tried from the end before giving up on a frame


@dataclass(frozen=True)
class Frame:
    """`text[:cut] + completion` parses; `text[cut:]` is the unfinished rest, kept verbatim."""

    language: str
    cut: int
    completion: str
    tree: Any = field(default=None, compare=False, repr=False)  # of head + completion

    def valid(self, head: str) -> bool:
        return parses(head + self.completion, self.language)


def _python_completion(head: str, closers: list[str]) -> str:
    """Close what Python leaves open at the end of `head`: brackets, then a block opener."""
    if closers:
        return "".join(closers)
    lines = [line for line in head[-4096:].splitlines() if line.strip()]
    if not lines or not lines[-1].rstrip().endswith(":"):
        return ""
    indent = len(lines[-1]) - len(lines[-1].lstrip())
    return ("" if head.endswith("\n") else "\n") + " " * (indent + 4) + "pass\n"


_CHAR_LITERAL = re.compile(r"'(?:\\.[^'\n]{0,8}|[^'\\\n])'")


def _closers(text: str, cuts: list[int], *, python: bool = False) -> dict[int, list[str]]:
    """For each cut in `cuts`, the closing brackets for the brackets `text[:cut]` leaves open
    (outside strings and comments), innermost first: one pass over the text."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    wanted = sorted(set(cuts))
    found: dict[int, list[str]] = {}
    stack: list[str] = []
    i, n, k = 0, len(text), 0
    while True:
        while k < len(wanted) and wanted[k] <= i:
            found[wanted[k]] = stack[::-1]
            k += 1
        if i >= n or k == len(wanted):
            break
        c = text[i]
        if (python and c == "#") or (not python and text.startswith("//", i)):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if not python and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if python and text.startswith(('"""', "'''"), i):
            j = text.find(text[i : i + 3], i + 3)
            i = n if j < 0 else j + 3
            continue
        if c == '"' or (c == "`" and not python) or (c == "'" and python):
            j = i + 1
            while j < n and text[j] != c and (c == "`" or text[j] != "\n"):
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c == "'":
            match = _CHAR_LITERAL.match(text, i)
            i = match.end() if match else i + 1  # else a Rust lifetime or label
            continue
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}" and stack and stack[-1] == c:
            stack.pop()
        i += 1
    for cut in wanted[k:]:
        found[cut] = stack[::-1]
    return found


def _completion(head: str, language: str, closers: list[str]) -> str:
    if language == "python":
        return _python_completion(head, closers)
    return "".join("\n" + c for c in closers) + ("\n" if closers else "")


def completion_for(head: str, language: str) -> str:
    """What closes the brackets (and, for Python, the block) `head` leaves open."""
    closers = _closers(head, [len(head)], python=language == "python")[len(head)]
    return _completion(head, language, closers)


def error_nodes(tree: Any) -> tuple[int, int]:
    """ERROR and MISSING nodes, and the bytes the ERROR nodes cover."""
    stack, count, covered = [tree.root_node], 0, 0
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            count += 1
            covered += node.end_byte - node.start_byte
        elif node.has_error:
            stack.extend(node.children)
    return count, covered


def frame(text: str, language: str, *, min_share: float = 0.5, quick: bool = False) -> Frame | None:
    """The frame of `text` in `language`: the whole text when it parses (after closing what is
    left open), else the longest head cut at one of the last line starts that does. None when
    no head of at least `min_share` of the text parses, or there is no grammar. `quick`
    (detection): None at once when the whole text has errors all over, as prose or another
    language has (a cut-off context has a few, at its end)."""
    parser = parser_for(language)
    if parser is None:
        return None
    if quick:  # judged without the last line, which a cut may have left in mid-string
        whole = text[: text.rstrip("\n").rfind("\n") + 1] or text
        data = (whole + completion_for(whole, language)).encode("utf-8")
        count, covered = error_nodes(parser.parse(data))
        if count > 4 or covered > 0.5 * len(data):
            return None
    candidates = [len(text)]
    position = len(text) - 1
    while len(candidates) <= _CANDIDATE_CUTS:
        position = text.rfind("\n", 0, position)
        if position < 0 or position + 1 < min_share * len(text):
            break
        candidates.append(position + 1)
    closers = _closers(text, candidates, python=language == "python")
    for cut in candidates:
        if cut < min_share * len(text) or not text[:cut].strip():
            break
        head = text[:cut]
        completion = _completion(head, language, closers[cut])
        tree = parse_clean(head + completion, language)
        if tree is not None:
            return Frame(language, cut, completion, tree)
    return None


def detect(text: str) -> Frame | None:
    """The frame of `text` in the first language whose grammar takes most of it and whose top
    level holds definitions or imports; None for prose."""
    best: Frame | None = None
    for language in DETECT:
        found = frame(
            text,
            language,
            min_share=0.5 if best is None else best.cut / len(text),
            quick=True,
        )
        if found is None or (best is not None and found.cut <= best.cut):
            continue
        kinds = {child.type for child in found.tree.root_node.named_children}
        if kinds & CODE_KINDS[language] or _assignments(found.tree, language):
            best = found
            if len(text) - found.cut <= 0.01 * len(text):  # all but (part of) a last line or so
                break
    return best


def _assignments(tree: Any, language: str) -> bool:
    return language == "python" and any(
        c.type == "expression_statement"
        and c.named_child_count
        and c.named_children[0].type == "assignment"
        for c in tree.root_node.named_children
    )


def _byte_to_char(text: str) -> Any:
    if text.isascii():
        return lambda b: b
    positions = []
    for index, char in enumerate(text):
        positions.extend([index] * len(char.encode("utf-8")))
    positions.append(len(text))
    return lambda b: positions[b]


@dataclass
class CodeUnits:
    """What may go from a frame's head: character spans removable token by token (inside
    comments and strings; indentation where the language ignores it) and whole-line
    statements/members (each removal checked)."""

    removable: list[tuple[int, int]]
    statements: list[tuple[int, int]]
    blank_runs: list[tuple[int, int]]  # newlines of runs of blank lines (one newline stays)
    segments: Segment  # where a removal is checked (see Segment)
    # list elements with their comma (arguments, parameters, items) within one line, collected
    # only when asked (method spread), each checked like a statement
    elements: list[tuple[int, int]] = field(default_factory=list)


def _element(node: Any, head: str, to_char: Any) -> tuple[int, int] | None:
    """`node` with the comma after it (and the spaces after that), or with the comma before it
    when it is the last of its list; None when it is not a list element within one line of
    `head`."""
    after, before = node.next_sibling, node.prev_sibling
    if after is not None and after.type == ",":
        start, end = to_char(node.start_byte), to_char(after.end_byte)
        while end < len(head) and head[end] == " ":
            end += 1
    elif before is not None and before.type == ",":
        start, end = to_char(before.start_byte), to_char(node.end_byte)
    else:
        return None
    return (start, end) if start < end <= len(head) and "\n" not in head[start:end] else None


class _LineOwner:
    """Which nodes own whole lines: nothing before them on their first line, nothing after
    them on their last but, possibly, a comment (which then goes with them)."""

    def __init__(self, head: str, cut: int, line_starts: list[int]) -> None:
        self.head, self.cut, self.line_starts = head, cut, line_starts
        self.trailing: list[tuple[int, int, int]] = []  # (first, stop, where the rest starts)

    def owned(self, start: int, end: int) -> tuple[int, int] | None:
        """The lines [first, stop) the node owns, or None (those with text after the node are
        kept for `with_trailing_comment`)."""
        if end > self.cut or end <= start:
            return None
        head = self.head
        first = self.line_starts[bisect.bisect_right(self.line_starts, start) - 1]
        if head[first:start].strip():
            return None
        stop = head.find("\n", end)
        stop = self.cut if stop < 0 else stop + 1
        rest = head[end:stop]
        if rest.strip():
            self.trailing.append((first, stop, end + len(rest) - len(rest.lstrip(" \t"))))
            return None
        return first, stop

    def with_trailing_comment(self, comments: dict[int, int]) -> list[tuple[int, int]]:
        """The lines of nodes followed only by a comment that ends on their last line."""
        return [
            (first, stop)
            for first, stop, after in self.trailing
            if comments.get(after, stop + 1) <= stop
        ]


def code_units(text: str, fr: Frame, *, elements_too: bool = False) -> CodeUnits:
    head = text[: fr.cut]
    tree = fr.tree
    to_char = _byte_to_char(head + fr.completion)
    line_starts = [0] + [m.end() for m in re.finditer("\n", head)]
    removable: list[tuple[int, int]] = []
    statements: set[tuple[int, int]] = set()
    elements: list[tuple[int, int]] = []

    comments: dict[int, int] = {}  # start -> end of each comment
    lines = _LineOwner(head, fr.cut, line_starts)
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        start, end = to_char(node.start_byte), to_char(node.end_byte)
        if start >= fr.cut:
            continue
        if node.type in COMMENT_TYPES:
            comments[start] = end
            body = head[start : min(end, fr.cut)].rstrip("\r\n")  # some grammars take the \n
            marker = 2 if body[:2] in ("//", "/*") else 1
            closing = 2 if body.endswith("*/") and marker == 2 and len(body) >= 4 else 0
            removable.append((start + marker, start + len(body) - closing))
        elif node.type in STRING_CONTENT_TYPES:
            removable.append((start, min(end, fr.cut)))
        if node.is_named and node.parent is not None:
            span = lines.owned(start, end)
            if span is not None:
                statements.add(span)
            if elements_too and node.type not in COMMENT_TYPES:
                span = _element(node, head, to_char)
                if span is not None:
                    elements.append(span)
        if node.type not in COMMENT_TYPES:
            stack.extend(node.children)
    statements.update(lines.with_trailing_comment(comments))
    if fr.language != "python":  # indentation carries no syntax outside Python
        for m in re.finditer(r"(?m)^[ \t]+", head):
            removable.append(m.span())
    # runs of blank lines: all their newlines but the last go (at the very start, all of them)
    blank_runs = [(0, m.end()) for m in re.finditer(r"\A(?:[ \t]*\n)+", head)]
    for m in re.finditer(r"(?<=.)\n(?:[ \t]*\n)+", head):
        blank_runs.append((m.start(), head.rfind("\n", 0, m.end())))
    root = Segment(0, fr.cut, (), (), fr.completion)
    root.split(_top_segments(head, fr, tree, to_char, line_starts))
    return CodeUnits(sorted(removable), sorted(statements), blank_runs, root, sorted(elements))


# a segment larger than this is split at the statements/members of its body, so a removal
# inside it is checked by parsing the piece it lies in (with the headers and footers around
# it), not the whole file
SPLIT_CHARS = 1500


@dataclass
class Segment:
    """A piece of the head that parses on its own once `before` (headers of the definitions
    around it), `extra` (the frame's completion or nothing) and `after` (their footers) are
    added: `before + text[start:end] + extra + after`."""

    start: int
    end: int
    before: tuple[tuple[int, int], ...]
    after: tuple[tuple[int, int], ...]
    extra: str = ""
    children: list[Segment] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)  # of the children

    def split(self, children: list[Segment]) -> Segment:
        self.children, self.starts = children, [child.start for child in children]
        return self

    def innermost(self, start: int, end: int) -> list[Segment]:
        """The chain of segments from this one down to the smallest holding [start, end)."""
        chain = [self]
        while chain[-1].children:
            kids = chain[-1].children
            index = bisect.bisect_right(chain[-1].starts, start) - 1
            if index < 0 or kids[index].end < end:
                break
            chain.append(kids[index])
        return chain


def _line_start(line_starts: list[int], position: int) -> int:
    return line_starts[bisect.bisect_right(line_starts, position) - 1]


def _body(node: Any) -> Any | None:
    """The block/body node of a definition (looking through decorators and exports)."""
    body = node.child_by_field_name("body")
    if body is not None:
        return body
    for child in node.named_children:
        if child.type.endswith(("_declaration", "_item", "_definition")):
            body = child.child_by_field_name("body")
            if body is not None:
                return body
    return None


def _top_segments(
    head: str, fr: Frame, tree: Any, to_char: Any, line_starts: list[int]
) -> list[Segment]:
    by_line: dict[int, list[Any]] = {}  # top-level nodes by the line start they begin on
    for child in tree.root_node.named_children:
        position = to_char(child.start_byte)
        if position < fr.cut:
            by_line.setdefault(_line_start(line_starts, position), []).append(child)
    bounds = sorted({0, fr.cut} | by_line.keys())
    segments = []
    for start, end in itertools.pairwise(bounds):
        last = end == fr.cut
        segment = Segment(start, end, (), (), fr.completion if last else "")
        inside = by_line.get(start, [])
        if (not last or not fr.completion) and len(inside) == 1:  # an open one is not split
            segment.split(_split(head, inside[0], segment, to_char, line_starts))
        segments.append(segment)
    return segments


def _split(
    head: str, node: Any, segment: Segment, to_char: Any, line_starts: list[int]
) -> list[Segment]:
    """Sub-segments of a large definition: one per member/statement of its body."""
    if segment.end - segment.start <= SPLIT_CHARS:
        return []
    body = _body(node)
    kids = [k for k in body.named_children] if body is not None else []
    if len(kids) < 2:
        return []
    bounds = [_line_start(line_starts, to_char(k.start_byte)) for k in kids]
    stop = head.find("\n", to_char(kids[-1].end_byte))
    stop = len(head) if stop < 0 else stop + 1
    if bounds != sorted(set(bounds)) or bounds[0] < segment.start or stop > segment.end:
        return []  # members sharing lines, or a body that does not own its lines
    bounds.append(stop)
    header, footer = (segment.start, bounds[0]), (stop, segment.end)
    out = []
    for kid, (start, end) in zip(kids, itertools.pairwise(bounds), strict=True):
        sub = Segment(start, end, (*segment.before, header), (footer, *segment.after))
        sub.split(_split(head, kid, sub, to_char, line_starts))
        out.append(sub)
    return out
