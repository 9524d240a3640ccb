"""Serving prepared prefixes from a real engine: a vLLM KV connector (`serving.vllm`, imported
only by vLLM itself), the compatibility checks run before an engine starts (`serving.compat`),
and `copilot-opt serve`'s server launcher (`serving.server`)."""

from copilot_cli.serving.compat import local_folder
from copilot_cli.serving.engines import load_llamacpp
from copilot_cli.serving.server import ServeOptions, check, transfer_config

__all__ = ["ServeOptions", "check", "load_llamacpp", "local_folder", "transfer_config"]
