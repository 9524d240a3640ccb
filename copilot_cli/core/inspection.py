"""What `inspect` reports about an artifact: its description and the problems verification found.

Each capability describes and verifies its own artifacts; these types carry the result. A
problem names the file it is about, so `inspect` can list every bad file, not only the first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from copilot_cli.core.errors import CopilotError

T = TypeVar("T")


@dataclass(frozen=True)
class Problem:
    """One file that failed a check, and why."""

    file: str
    problem: str

    def to_dict(self) -> dict[str, str]:
        return {"file": self.file, "problem": self.problem}


@dataclass(frozen=True)
class Expected:
    """What a verified artifact must have been made for (from --model); None: not compared."""

    model_fingerprint: str | None = None
    tokenizer_fingerprint: str | None = None
    geometry: Any = None  # the model's KV geometry (kv.ModelGeometry), for KV artifacts


@dataclass
class Inspection:
    """An artifact described and, unless `verified` is False, checked byte for byte.

    `parts` holds the inspections of the artifacts a folder holds (a build folder)."""

    path: str
    kind: str
    info: dict[str, Any]
    verified: bool
    problems: list[Problem] = field(default_factory=list)
    parts: list[Inspection] = field(default_factory=list)

    @property
    def all_problems(self) -> list[Problem]:
        return [*self.problems, *(p for part in self.parts for p in part.all_problems)]

    @property
    def ok(self) -> bool:
        return not self.all_problems

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "path": self.path, **self.info}
        out["verified"] = self.verified
        out["problems"] = [p.to_dict() for p in self.problems]
        if self.parts:
            out["parts"] = [part.to_dict() for part in self.parts]
        return out


def checked(problems: list[Problem], file: str, check: Callable[[], T]) -> T | None:
    """Run `check`; a refusal it raises becomes a problem about `file` (returns None)."""
    try:
        return check()
    except CopilotError as exc:
        problems.append(Problem(file, exc.message))
        return None


def unreadable(path: str, kind: str, file: str, exc: CopilotError, *, verify: bool) -> Inspection:
    """A file too damaged to describe: with verification asked for, that is what verification
    found (a `bad:` line, exit 1); without it, the refusal stands (nothing to describe)."""
    if not verify:
        raise exc
    return Inspection(path, kind, {}, verify, [Problem(file, exc.message)])
