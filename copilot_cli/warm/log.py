"""The request log: one JSON object per line, one line per request a server answered.

    {"t": 1764720000.25, "session": "dev-17", "prefix": "code_review",
     "repository": "api", "files": ["src/kv/lru.py"], "chunks": ["3f2a9c0d1e4b5a67"]}

`t` (seconds, any epoch, non-decreasing is not required), `session` (who asked: an editor
session, a user) and `prefix` (the stored prefix served, or null) are required; `repository`,
`files` and `chunks` (the chunk ids put into the request's context) are optional. Unknown keys
are kept out of the way (ignored). `RequestLog` appends lines from a serving process.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from copilot_cli.core.errors import InputError
from copilot_cli.core.inputs import decode_utf8

FORMAT = "copilot-opt.request-log"
MAX_LINE = 1 << 20


@dataclass(frozen=True)
class Request:
    t: float
    session: str
    prefix: str | None
    repository: str | None = None
    files: tuple[str, ...] = ()
    chunks: tuple[str, ...] = field(default=())

    def items(self) -> list[tuple[str, str]]:
        """(kind, id) of what this request used: its prefix, then its chunks."""
        out = [("prefix", self.prefix)] if self.prefix else []
        return out + [("chunk", c) for c in self.chunks]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": self.t, "session": self.session, "prefix": self.prefix}
        if self.repository is not None:
            out["repository"] = self.repository
        if self.files:
            out["files"] = list(self.files)
        if self.chunks:
            out["chunks"] = list(self.chunks)
        return out


def _strings(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f'"{key}" must be a list of non-empty strings')
    return tuple(value)


def parse_request(obj: Any) -> Request:
    if not isinstance(obj, dict):
        raise ValueError("a line must be a JSON object")
    t, session, prefix = obj.get("t"), obj.get("session"), obj.get("prefix")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or t != t or abs(t) == float("inf"):
        raise ValueError('"t" must be a finite number (seconds)')
    if not isinstance(session, str) or not session:
        raise ValueError('"session" must be a non-empty string')
    if prefix is not None and (not isinstance(prefix, str) or not prefix):
        raise ValueError('"prefix" must be a non-empty string or null')
    repository = obj.get("repository")
    if repository is not None and (not isinstance(repository, str) or not repository):
        raise ValueError('"repository" must be a non-empty string')
    return Request(
        t=float(t),
        session=session,
        prefix=prefix,
        repository=repository,
        files=_strings(obj.get("files"), "files"),
        chunks=_strings(obj.get("chunks"), "chunks"),
    )


def read_log(paths: Iterable[Path]) -> list[Request]:
    """Every request of every log, ordered by time (stable). A malformed line is an
    InputError naming `file:line`."""
    requests: list[Request] = []
    for path in paths:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise InputError(
                f"cannot read the request log ({exc.strerror})", where=str(path)
            ) from None
        text = decode_utf8(data, str(path))
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            if len(line) > MAX_LINE:
                raise InputError(f"a line longer than {MAX_LINE:,} characters", where=where)
            try:
                requests.append(parse_request(json.loads(line)))
            except (ValueError, RecursionError) as exc:
                raise InputError(str(exc).splitlines()[0][:200], where=where) from None
    if not requests:
        raise InputError("no request in the log", where=", ".join(map(str, paths)))
    return sorted(requests, key=lambda r: r.t)


class RequestLog:
    """Appends requests to a log file from a serving process (thread-safe, one write per line,
    so concurrent writers of one file interleave whole lines)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def record(
        self,
        session: str,
        prefix: str | None,
        *,
        repository: str | None = None,
        files: Iterable[str] = (),
        chunks: Iterable[str] = (),
        t: float | None = None,
    ) -> None:
        request = Request(
            t=time.time() if t is None else t,
            session=session,
            prefix=prefix,
            repository=repository,
            files=tuple(files),
            chunks=tuple(chunks),
        )
        line = (json.dumps(request.to_dict(), sort_keys=True, ensure_ascii=False) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
