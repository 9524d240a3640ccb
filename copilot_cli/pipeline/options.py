"""Settings of build (no torch import: the CLI builds these)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from copilot_cli.core.options import coerce_paths, require, setting
from copilot_cli.core.outputs import check_output_shape
from copilot_cli.paths import EXAMPLE_CONFIG


@dataclass(frozen=True)
class BuildOptions:
    """Settings of build: the config file, the output folder, --force and --dry-run."""

    config: Path = setting(Path("copilot-opt.yaml"), help="Pipeline config.")
    out: Path = setting(Path("build"), help="Output folder.")
    force: bool = setting(False, help="Rebuild every step.")
    dry_run: bool = setting(False, help="Print the plan; change nothing.")

    def __post_init__(self) -> None:
        coerce_paths(self)
        require(
            self.config.is_file(),
            "config",
            f"{self.config} does not exist: write one (docs/build.md) or build the shipped "
            f"example with -c {EXAMPLE_CONFIG}",
        )
        check_output_shape(self.out, "out", folder=True)
