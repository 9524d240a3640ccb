"""Prompt templates: validated, sandboxed, precompiled, split into static prefix and rest.

Names are imported on first use (core/lazy.py)."""

from copilot_cli.core.lazy import exports

_WHERE = {
    "CompileOptions": "copilot_cli.prompts.options",
    "CompileResult": "copilot_cli.prompts.compiler",
    "InputsError": "copilot_cli.prompts.errors",
    "PromptBundle": "copilot_cli.prompts.bundle",
    "RenderLimits": "copilot_cli.prompts.limits",
    "RenderOptions": "copilot_cli.prompts.options",
    "RenderResult": "copilot_cli.prompts.render",
    "RenderedPrompt": "copilot_cli.prompts.bundle",
    "TemplateError": "copilot_cli.prompts.errors",
    "compile_templates": "copilot_cli.prompts.compiler",
    "completion_inputs": "copilot_cli.prompts.completion",
    "inspect_bundle": "copilot_cli.prompts.inspect",
    "language_of": "copilot_cli.prompts.completion",
    "load_bundle": "copilot_cli.prompts.bundle",
    "overview_prefix": "copilot_cli.prompts.completion",
    "placeholder_inputs": "copilot_cli.prompts.completion",
    "render_template": "copilot_cli.prompts.render",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)
