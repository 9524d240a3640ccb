"""Serving prepared KV: in transformers (`generate_with_prefix`, a request's stored snippets
placed: serving.prefixed), from a real engine (a vLLM KV connector, `serving.vllm`, imported only
by vLLM itself; llama.cpp restoring slots, `serving.llamacpp`), the compatibility checks run
before an engine starts (`serving.compat`), `copilot-opt serve`'s server launcher
(`serving.server`) and the editors' endpoint (`serving.endpoint`).

Names are imported on first use (core/lazy.py)."""

from copilot_cli.core.lazy import exports

_WHERE = {
    "ServeOptions": "copilot_cli.serving.options",
    "StoredSnippet": "copilot_cli.serving.prefixed",
    "assemble_request": "copilot_cli.serving.prefixed",
    "check": "copilot_cli.serving.server",
    "context_pieces": "copilot_cli.serving.prefixed",
    "generate_with_prefix": "copilot_cli.serving.prefixed",
    "load_llamacpp": "copilot_cli.serving.engines",
    "local_folder": "copilot_cli.serving.compat",
    "prepare_prompt": "copilot_cli.serving.prefixed",
    "transfer_config": "copilot_cli.serving.server",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)
