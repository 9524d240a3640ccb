"""The pipeline: one config, every capability as a content-hashed step, incremental."""

from copilot_cli.pipeline.builder import BuildOptions, BuildResult, run_build
from copilot_cli.pipeline.config import BuildConfig, load_build_config
from copilot_cli.pipeline.inspect import inspect_artifact

__all__ = [
    "BuildConfig",
    "BuildOptions",
    "BuildResult",
    "inspect_artifact",
    "load_build_config",
    "run_build",
]
