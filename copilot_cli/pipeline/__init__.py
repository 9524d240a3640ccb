"""The pipeline: one config, every capability as a content-hashed step, incremental.

Names are imported on first use (core/lazy.py)."""

from copilot_cli.core.lazy import exports

_WHERE = {
    "BuildConfig": "copilot_cli.pipeline.config",
    "BuildOptions": "copilot_cli.pipeline.options",
    "BuildResult": "copilot_cli.pipeline.builder",
    "inspect_artifact": "copilot_cli.pipeline.inspect",
    "load_build_config": "copilot_cli.pipeline.config",
    "run_build": "copilot_cli.pipeline.builder",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)
