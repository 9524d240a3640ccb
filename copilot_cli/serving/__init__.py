"""Serving prepared prefixes from a real engine: a vLLM KV connector (`serving.vllm`, imported
only by vLLM itself), the compatibility checks run before an engine starts (`serving.compat`),
and `copilot-opt serve`'s server launcher (`serving.server`)."""
