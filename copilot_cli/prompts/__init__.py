"""Prompt templates: validated, sandboxed, precompiled, split into static prefix and rest."""

from copilot_cli.prompts.bundle import PromptBundle, RenderedPrompt, load_bundle
from copilot_cli.prompts.compiler import CompileOptions, CompileResult, compile_templates
from copilot_cli.prompts.errors import InputsError, TemplateError
from copilot_cli.prompts.sandbox import RenderLimits

__all__ = [
    "CompileOptions",
    "CompileResult",
    "InputsError",
    "PromptBundle",
    "RenderLimits",
    "RenderedPrompt",
    "TemplateError",
    "compile_templates",
    "load_bundle",
]
