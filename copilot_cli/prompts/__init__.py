"""Prompt templates: validated, sandboxed, precompiled, split into static prefix and rest."""

from copilot_cli.prompts.bundle import PromptBundle, RenderedPrompt, load_bundle
from copilot_cli.prompts.compiler import CompileResult, compile_templates
from copilot_cli.prompts.errors import InputsError, TemplateError
from copilot_cli.prompts.inspect import inspect_bundle
from copilot_cli.prompts.options import CompileOptions, RenderOptions
from copilot_cli.prompts.render import RenderResult, render_template
from copilot_cli.prompts.sandbox import RenderLimits

__all__ = [
    "CompileOptions",
    "CompileResult",
    "InputsError",
    "PromptBundle",
    "RenderLimits",
    "RenderOptions",
    "RenderResult",
    "RenderedPrompt",
    "TemplateError",
    "compile_templates",
    "inspect_bundle",
    "load_bundle",
    "render_template",
]
