"""One exception type per failure kind; the CLI maps each to one line and an exit code."""

from __future__ import annotations


class CopilotError(Exception):
    """Base class for errors a user can act on (bad input, wrong model...): exit code 2.

    Args:
        message: what went wrong and, where useful, how to fix it.
        where: the file, field or option the message is about (printed first).
    """

    exit_code = 2

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.message = message
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class InputError(CopilotError):
    """A file, option or field given by the user is missing or malformed."""


class ModelLoadError(CopilotError):
    """A model or tokenizer could not be loaded from what the user pointed at."""


class ArtifactError(CopilotError):
    """An artifact is truncated, corrupt, or of an unknown format or version."""


class FingerprintMismatch(ArtifactError):
    """An artifact was made for another model or tokenizer than the one it is used with."""

    def __init__(self, what: str, *, expected: str, found: str, where: str | None = None) -> None:
        self.expected = expected
        self.found = found
        super().__init__(
            f"made for {what} {found[:16]}, but the loaded {what} is {expected[:16]}",
            where=where,
        )


class Interrupted(CopilotError):
    """The user stopped a long run (Ctrl-C); the message says what it had finished."""

    exit_code = 130


class CheckFailed(Exception):
    """A check or regression gate failed: exit code 1 (not an input problem)."""

    exit_code = 1
