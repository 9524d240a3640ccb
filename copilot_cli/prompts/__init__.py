"""Prompt templates: validated, sandboxed, precompiled, split into static prefix and rest."""

from copilot_cli.prompts.bundle import PromptBundle, RenderedPrompt, load_bundle
from copilot_cli.prompts.compiler import CompileResult, compile_templates
from copilot_cli.prompts.completion import (
    completion_inputs,
    language_of,
    overview_prefix,
    placeholder_inputs,
)
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
    "completion_inputs",
    "inspect_bundle",
    "language_of",
    "load_bundle",
    "overview_prefix",
    "placeholder_inputs",
    "render_template",
]
