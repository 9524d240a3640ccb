"""build: one config, the whole pipeline, incremental."""

from copilot_cli.build.builder import BuildOptions, BuildResult, run_build

__all__ = ["BuildOptions", "BuildResult", "run_build"]
