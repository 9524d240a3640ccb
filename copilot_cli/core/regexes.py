"""Regular expressions from users (schema `pattern`s, `prune --protect`), with bounded work.

Python's `re` backtracks: `(a+)+$` on 30 characters runs for minutes. A user's pattern runs in
RE2 instead, whose time is linear in the text, so the same input always gives the same answer
in bounded time. RE2 has no lookaround or backreference, and its `\\w \\d \\s \\b` are ASCII-only;
a pattern that needs one of those, or uses a class shorthand on non-ASCII text, runs in the
`regex` module (Python's semantics) under a deadline instead. Running past it is a
`RegexTooSlow` naming the pattern (exit 2), never a hang.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from copilot_cli.core import lazy
from copilot_cli.core.errors import InputError

re2 = lazy.module("re2")
regex = lazy.module("regex")

# Seconds one search may take in the backtracking engine; linear-time RE2 needs no deadline.
DEADLINE_SECONDS = 1.0
MAX_PATTERN_CHARS = 10_000
# A class shorthand (not an escaped backslash before a letter): ASCII-only in RE2.
_SHORTHAND = re.compile(r"(?<!\\)(?:\\\\)*\\[wWdDsSbB]")


class RegexTooSlow(InputError):
    """A user pattern run by the backtracking engine went past its deadline."""


@dataclass(frozen=True)
class BoundedRegex:
    """One compiled user pattern: RE2 where it means the same as Python's `re`, else `regex`."""

    pattern: str
    where: str
    linear: Any  # RE2, or None when the pattern needs backtracking
    backtracking: Any
    ascii_only_classes: bool  # RE2 would read \\w \\d \\s \\b differently on non-ASCII text

    def search(self, text: str) -> bool:
        """Whether the pattern matches anywhere in `text`."""
        engine = self._engine(text)
        if engine is self.linear:
            return engine.search(text) is not None
        return self._deadline(lambda: engine.search(text, timeout=DEADLINE_SECONDS) is not None)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """(start, end) character offsets of every non-overlapping match."""
        engine = self._engine(text)
        if engine is self.linear:
            return [m.span() for m in engine.finditer(text)]
        return self._deadline(
            lambda: [m.span() for m in engine.finditer(text, timeout=DEADLINE_SECONDS)]
        )

    def _engine(self, text: str) -> Any:
        if self.linear is not None and (not self.ascii_only_classes or text.isascii()):
            return self.linear
        return self.backtracking

    def _deadline(self, work: Any) -> Any:
        try:
            return work()
        except TimeoutError:
            raise RegexTooSlow(
                f"pattern {clip(self.pattern)!r} ran past {DEADLINE_SECONDS:g} s on this "
                "input (catastrophic backtracking); simplify it",
                where=self.where,
            ) from None


def clip(pattern: str, limit: int = 80) -> str:
    return pattern if len(pattern) <= limit else pattern[: limit - 1] + "…"


@functools.lru_cache(maxsize=512)
def bounded(pattern: str, where: str) -> BoundedRegex:
    """Compile a user's `pattern`; `where` (an option or file:field) names it in errors.

    Raises:
        InputError: the pattern does not compile, or is longer than MAX_PATTERN_CHARS.
    """
    if not isinstance(pattern, str):
        raise InputError(f"pattern must be a string, got {type(pattern).__name__}", where=where)
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InputError(
            f"pattern is {len(pattern):,} characters (at most {MAX_PATTERN_CHARS:,})", where=where
        )
    try:
        backtracking = regex.compile(pattern)
    except (regex.error, OverflowError, RecursionError) as exc:
        raise InputError(f"regex {clip(pattern)!r} does not compile ({exc})", where=where) from None
    options = re2.Options()
    options.log_errors = False  # RE2 would print its own lines on stderr
    try:
        linear = re2.compile(pattern, options)
    except re2.error:
        linear = None  # lookaround, a backreference, or a construct RE2 lacks
    return BoundedRegex(
        pattern, where, linear, backtracking, _SHORTHAND.search(pattern) is not None
    )
