"""How large a value's text would be, found before the text is built.

`str()`, `tojson`, `pprint` and friends of a container build its whole text first; a list that
holds one 1M-character string 300 times is 300 references, but its text is 300M characters.
`text_size` walks the value (every reference counted as often as it is reached) and stops as
soon as the running total passes a limit, so the walk itself is bounded by that limit, not by
the value. The estimate counts each string's characters, each number's digits and a few
characters of punctuation per item: within a small factor of any of the serializations (escapes
can grow a string up to 6x; the output limit still applies to what is finally built).
"""

from __future__ import annotations

import math
import string
from typing import Any

_OTHER = 32  # an object of another type: its text is short (a sandbox hands out no big ones)
_FORMATTER = string.Formatter()


def text_size(value: Any, limit: int) -> int:
    """The estimated length of `value`'s text, or a number above `limit` (the walk stops there)."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str or isinstance(item, str):
            total += len(item) + 2
        elif kind is int or kind is bool:
            total += max(1, math.ceil(item.bit_length() * 0.302)) + 2 if kind is int else 5
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += 2 + len(item)
            stack.extend(item)
        elif isinstance(item, dict):
            total += 2 + 2 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (bytes, bytearray)):
            total += 4 * len(item) + 3
        else:
            total += _OTHER
        if total > limit:
            return total
    return total


def items_size(value: Any, limit: int) -> int:
    """How many items adding `value`'s items together would hold (lists, tuples, strings)."""
    total = 0
    for item in value:
        total += len(item) if isinstance(item, (str, list, tuple)) else 1
        if total > limit:
            break
    return total


def format_widths(fmt: str, depth: int = 0) -> int:
    """The characters `str.format`'s width and precision fields can pad to (nested fields too);
    a malformed format adds nothing (it fails on its own)."""
    total = 0
    try:
        fields = list(_FORMATTER.parse(fmt))
    except ValueError:
        return 0
    for _literal, name, spec, _conversion in fields:
        if name is None or not spec:
            continue
        digits = "".join(c if c.isdigit() else " " for c in spec).split()
        total += sum(int(d[:13]) for d in digits)  # 13 digits: already far past any limit
        if "{" in spec and depth < 2:
            total += format_widths(spec, depth + 1)
    return total
