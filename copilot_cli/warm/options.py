"""Settings of warm-plan (no torch import: the CLI builds these)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from copilot_cli.core.options import OptionError, coerce_paths, require, require_count, setting
from copilot_cli.core.outputs import check_output_shape

PREDICTOR_NAMES = ("auto", "frequency-recency", "markov-1", "markov-2", "gru")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B?\s*$", re.IGNORECASE)


def parse_bytes(value: str | int, option: str = "budget") -> int:
    """`480MB`, `86M`, `1.5GiB`, `12000000` -> bytes (K/M/G/T: 1000s; with i: 1024s)."""
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise OptionError(option, f"{value!r} is not a size (e.g. 86MB, 1.5GiB, 12000000)")
    number, unit, binary = match.groups()
    power = "KMGT".find(unit.upper()) + 1 if unit else 0
    return int(float(number) * (1024 if binary else 1000) ** power)


@dataclass(frozen=True)
class WarmPlanOptions:
    """Settings of warm-plan.

    Attributes:
        logs: request logs (docs/formats.md).
        out: the plan to write (JSON).
        budget: bytes the resident tiers (L0 + L1) may hold together.
        kv: a KV folder: prefix sizes (what a PrefixStore holds) and the fingerprints the
            plan is bound to.
        chunks: a chunks JSONL: chunk sizes (UTF-8 bytes of their text).
        predictor: `auto` (the best on held-out time, simpler on ties) or one by name.
        window: seconds ahead the plan is for.
        l0_probability: items at least this likely go to L0 (always resident).
        l0_share: the most of the budget L0 may pin; likely items beyond it go to L1 (pre-loaded
            but evictable), so the store keeps room to follow what requests actually use.
        fp_rate: the L2 Bloom filter's false-positive rate.
    """

    logs: tuple[Path, ...] = setting((), yaml=False, help="Request logs (JSONL, docs/formats.md).")
    out: Path = setting(Path("build/warm-plan.json"), yaml=False, help="The plan to write.")
    budget: int = setting(
        64 << 20, help="Bytes L0 + L1 may hold (e.g. 86MB, 1GiB; default 64 MiB)."
    )
    kv: Path | None = setting(None, yaml=False, help="KV folder: prefix sizes.")
    chunks: Path | None = setting(None, yaml=False, help="Chunks JSONL: chunk sizes.")
    predictor: str = setting(
        "auto", help="auto (best measured), frequency-recency, markov-1, markov-2 or gru."
    )
    window: float = setting(600.0, help="Seconds ahead to plan for.")
    l0_probability: float = 0.5
    l0_share: float = setting(
        0.5, help="The most of the budget L0 may pin (the rest is evictable L1)."
    )
    fp_rate: float = 0.01

    def __post_init__(self) -> None:
        coerce_paths(self)
        require(bool(self.logs), "logs", "give at least one request log")
        for log in self.logs:
            require(log.is_file(), "logs", f"{log} is not a file")
        require_count(self.budget, "budget", low=1)
        require(self.kv is None or self.kv.is_dir(), "kv", f"{self.kv} is not a KV folder")
        require(
            self.chunks is None or self.chunks.is_file(), "chunks", f"{self.chunks} is not a file"
        )
        require(
            self.kv is not None or self.chunks is not None,
            "kv",
            "give --kv, --chunks or both: item sizes come from them",
        )
        require(
            self.predictor in PREDICTOR_NAMES,
            "predictor",
            f"choose one of {', '.join(PREDICTOR_NAMES)}",
        )
        require(
            self.window == self.window and 1 <= self.window <= 86400 * 7,
            "window",
            f"{self.window} is outside [1, 604800] seconds",
        )
        require(
            0 < self.l0_probability <= 1,
            "l0_probability",
            f"{self.l0_probability} is outside (0, 1]",
        )
        require(0 <= self.l0_share <= 1, "l0_share", f"{self.l0_share} is outside [0, 1]")
        require(0 < self.fp_rate < 0.5, "fp_rate", f"{self.fp_rate} is outside (0, 0.5)")
        check_output_shape(self.out, "out", folder=False)
