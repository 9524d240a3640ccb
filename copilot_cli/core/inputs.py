"""Reading what users hand in (text files, JSON, stdin) with errors that say what is wrong
and where: the file, and for undecodable text the byte offset."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from copilot_cli.core.errors import InputError

STDIN = "-"


def read_bytes(source: str | Path, what: str = "file") -> tuple[bytes, str]:
    """(bytes, name for errors) of a file, or of stdin for "-"."""
    name = "stdin" if str(source) == STDIN else str(source)
    if str(source) == STDIN:
        return sys.stdin.buffer.read(), name
    path = Path(source)
    if path.is_dir():
        raise InputError(f"is a folder, expected a {what}", where=name)
    if path.exists() and not path.is_file():  # a FIFO would block, a device never end
        raise InputError(
            f"is not a regular file (a pipe, device or socket), expected a {what}", where=name
        )
    try:
        return path.read_bytes(), name
    except FileNotFoundError:
        raise InputError(f"{what} does not exist", where=name) from None
    except OSError as exc:
        raise InputError(f"cannot read the {what} ({exc.strerror})", where=name) from None


def decode_utf8(data: bytes, name: str) -> str:
    """UTF-8 text, or InputError naming the byte offset of the first undecodable byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"not UTF-8 text: byte {exc.start} (0x{data[exc.start]:02x}) cannot be decoded",
            where=name,
        ) from None


def repository_name_problem(name: str) -> str | None:
    """Why `name` cannot name a file of a repository (None: it can): a request names files
    the way the chunks do, relative to the repository root, never absolute or through '..'."""
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "holds a control character (a line break, a tab, NUL...)"
    posix = name.replace("\\", "/")
    if posix.startswith("/") or (len(posix) > 1 and posix[1] == ":"):
        return "is an absolute path: name the file relative to the repository"
    if ".." in posix.split("/"):
        return "goes up a folder ('..'): name a file inside the repository"
    return None


# Folders that hold no repository: their files are the kernel's (reads that block, sizes that
# lie, entries that vanish mid-walk), and walking them takes minutes before failing.
SYSTEM_FOLDERS = ("/proc", "/sys", "/dev")


def repository_folder_problem(path: Path) -> str | None:
    """Why folder `path` cannot be a repository to walk (None: it can): the filesystem root
    (everything, /proc included) or a kernel folder."""
    resolved = os.path.realpath(path)
    if resolved == os.path.realpath(os.sep):
        return f"{path} is the filesystem root: give a repository folder"
    for system in SYSTEM_FOLDERS:
        if resolved == system or resolved.startswith(system + os.sep):
            return f"{path} is under {system}, the kernel's files: give a repository folder"
    return None


def repository_file(repo: Path, name: str) -> Path:
    """The regular file `name` inside `repo`, resolved: refuses a name that is absolute or goes
    up, and a path that leaves the repository through a symlink (of the file or a folder).

    Raises:
        InputError: naming the file, with the reason.
    """
    if problem := repository_name_problem(name):
        raise InputError(problem, where=name)
    root = os.path.realpath(repo)
    if not os.path.isdir(root):
        raise InputError("the repository folder does not exist", where=str(repo))
    resolved = os.path.realpath(os.path.join(root, name))
    if os.path.commonpath([root, resolved]) != root:
        raise InputError(f"leads outside the repository {repo} (a symlink)", where=name)
    if not os.path.isfile(resolved):
        raise InputError(f"no such file under {repo}", where=name)
    return Path(resolved)


def read_text(source: str | Path, what: str = "text file") -> str:
    """A text file (or stdin): refuses binary content (NUL bytes) and non-UTF-8 bytes."""
    data, name = read_bytes(source, what)
    nul = data.find(b"\0", 0, 1 << 16)
    if nul >= 0:
        raise InputError(f"binary content (a NUL byte at {nul}); expected text", where=name)
    return decode_utf8(data, name)


def parse_json(text: str, name: str) -> Any:
    """JSON with errors naming the line and column; nesting too deep to parse is refused."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})", where=name
        ) from None
    except RecursionError:
        raise InputError("JSON nested too deeply to parse", where=name) from None


def read_json_object(source: str | Path, what: str = "JSON file") -> dict[str, Any]:
    """A JSON object from a file or stdin."""
    data, name = read_bytes(source, what)
    value = parse_json(decode_utf8(data, name), name)
    if not isinstance(value, dict):
        raise InputError("must be a JSON object", where=name)
    return value


def repository_list(source: str | Path) -> tuple[Path, ...]:
    """Folders named one per line (relative to the list file; blank lines and `#` comments
    skipped)."""
    base = Path.cwd() if str(source) == STDIN else Path(source).resolve().parent
    lines = read_text(source, "repository list").splitlines()
    paths = []
    for number, line in enumerate(lines, 1):
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        path = base / entry
        if not path.is_dir():
            raise InputError(f"{path} is not a folder", where=f"{source}:{number}")
        if problem := repository_folder_problem(path):
            raise InputError(problem, where=f"{source}:{number}")
        paths.append(path)
    if not paths:
        raise InputError("names no repository", where=str(source))
    return tuple(paths)


def check_cache_dir() -> None:
    """Refuse, before any work, a COPILOT_OPT_CACHE_DIR that cannot hold the caches (a file, a
    path below a file, a place that cannot be created or written): a command would otherwise
    fail after writing its output, and the next run refuse that output as not its own."""
    env = os.environ.get("COPILOT_OPT_CACHE_DIR")
    if not env:
        return
    where = "COPILOT_OPT_CACHE_DIR"
    path = Path(env)
    if path.exists() and not path.is_dir():
        raise InputError(f"{env} is not a folder: point it at a folder for the caches", where=where)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{env} cannot be created ({exc.strerror})", where=where) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError(f"{env} is not writable", where=where)
