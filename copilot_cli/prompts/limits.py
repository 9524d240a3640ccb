"""What one render may cost (no Jinja import: the options and the CLI read these)."""

from __future__ import annotations

from dataclasses import dataclass

from copilot_cli.core.options import require_count, require_number

MAX_OUTPUT_CHARS = 1_000_000
MAX_LOOP_ITERATIONS = 1_000_000
MAX_SECONDS = 5.0


@dataclass(frozen=True)
class RenderLimits:
    """What one render may cost.

    Attributes:
        max_output_chars: characters of output, and of any single value built on the way.
        max_loop_iterations: loop iterations summed over the whole render (nested loops
            multiply, so 1,000 x 1,000 already reaches the default).
        max_seconds: wall-clock time of one render.
    """

    max_output_chars: int = MAX_OUTPUT_CHARS
    max_loop_iterations: int = MAX_LOOP_ITERATIONS
    max_seconds: float = MAX_SECONDS

    def __post_init__(self) -> None:
        for name in ("max_output_chars", "max_loop_iterations"):
            require_count(getattr(self, name), name, low=1)
        require_number(self.max_seconds, "max_seconds", low=0.0, low_open=True)
