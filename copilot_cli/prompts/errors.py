"""Errors of the prompts capability."""

from __future__ import annotations

from copilot_cli.core.errors import CopilotError


class TemplateError(CopilotError):
    """A template file is malformed, unsafe, or fails to validate or render.

    Carries `file` and `line` (1-based, in the template file) when known.
    """

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None) -> None:
        self.file = file
        self.line = line
        where = f"{file}:{line}" if file and line else file
        super().__init__(message, where=where)


class InputsError(CopilotError):
    """Inputs given to a template do not validate against its schema (carries the JSON path)."""

    def __init__(self, message: str, *, path: str, template: str) -> None:
        self.path = path
        self.template = template
        super().__init__(message, where=f"{template}: {path}")
