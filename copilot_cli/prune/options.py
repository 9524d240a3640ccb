"""Settings of prune (no torch import: the CLI builds these)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from copilot_cli.core.errors import InputError
from copilot_cli.core.modelspec import ModelSpec
from copilot_cli.core.options import OptionError, require, require_count, require_number, setting
from copilot_cli.core.regexes import bounded
from copilot_cli.core.syntax import EXTENSIONS, GRAMMARS, PROSE

METHODS = ("entropy", "attention", "hybrid", "ewma", "spread", "search")
MAX_EWMA_THRESHOLD = 100.0  # a multiple of the running level: beyond this nothing is kept


@dataclass(frozen=True)
class PruneOptions:
    """Settings of prune.

    At most one of `rate` (share of tokens kept), `target_tokens` and `threshold` (keep the
    tokens whose method score reaches it: a percentile in [0, 1] for entropy/attention/hybrid,
    a multiple of the running level for ewma). With none, ewma keeps what stands 1.2x above its
    level (the seed's margin); the other methods need one.

    Attributes:
        text: what to compress.
        method: entropy, attention, hybrid (default), ewma, spread (no scores: removal
            spread evenly over the text) or search (spread patterns, mixed part by part to
            keep the model's predictions on its own continuation closest); spread and search
            need a rate or a target token count.
        protect: regexes of text never removed.
        language: a grammar name, "text", or None to detect (see `language_for_path`).
        window, overlap: scoring window and its overlap, in tokens.
        model: the scoring model, loaded when none is handed in.
    """

    text: str = setting("", yaml=False)
    rate: float | None = setting(None, help="Share of tokens kept, in (0, 1].")
    target_tokens: int | None = setting(None, help="Keep about this many tokens.")
    threshold: float | None = setting(
        None,
        help=(
            "Keep tokens scoring at least this: a percentile in [0, 1] (entropy, "
            "attention, hybrid) or a multiple of the running level (ewma; 1.2 by "
            "default)."
        ),
    )
    method: Literal["entropy", "attention", "hybrid", "ewma", "spread", "search"] = setting(
        "hybrid", help="entropy, attention, hybrid, ewma, spread, search."
    )
    protect: tuple[str, ...] = setting((), help="Regex of text never removed (repeatable).")
    language: str | None = setting(
        None, help="A grammar name or text (default: from the extension)."
    )
    window: int = 512
    overlap: int = 128
    model: ModelSpec = setting(default_factory=ModelSpec, yaml=False)

    def __post_init__(self) -> None:
        given = [x is not None for x in (self.rate, self.target_tokens, self.threshold)]
        conflict = "threshold" if given[2] else "target_tokens"
        require(sum(given) <= 1, conflict, "give only one of rate, target_tokens and threshold")
        require(
            any(given) or self.method == "ewma",
            "rate",
            f"method {self.method} needs a rate, a target token count or a threshold",
        )
        require(
            self.method in METHODS,
            "method",
            f"unknown method {self.method!r}; choose {', '.join(METHODS)}",
        )
        require(
            not (self.method in ("spread", "search") and self.threshold is not None),
            "threshold",
            f"method {self.method} has no scores to threshold; give a rate or a target token count",
        )
        if self.rate is not None:
            require_number(self.rate, "rate", low=0.0, high=1.0, low_open=True)
        if self.target_tokens is not None:
            require_count(self.target_tokens, "target_tokens", low=1)
        if self.threshold is not None:
            high = MAX_EWMA_THRESHOLD if self.method == "ewma" else 1.0
            require_number(self.threshold, "threshold", low=0.0, high=high)
        require(
            self.language in (None, "text", *GRAMMARS),
            "language",
            f"unknown language {self.language!r}; choose text or {', '.join(GRAMMARS)}",
        )
        require_count(self.window, "window", low=16, high=1 << 20)
        require_count(self.overlap, "overlap", high=self.window - 1)
        for pattern in self.protect:
            try:
                bounded(pattern, "protect")
            except InputError as exc:
                raise OptionError("protect", exc.message) from None


def language_for_path(path: str | Path) -> str | None:
    """The grammar (or "text" for prose) a file extension names; None: detect from content."""
    suffix = Path(path).suffix.lower()
    return EXTENSIONS.get(suffix) or ("text" if suffix in PROSE else None)
