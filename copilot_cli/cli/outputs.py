"""Output paths checked before any work: a file where a folder is expected or the reverse is
exit 2 naming the option, never an IsADirectoryError after minutes of work."""

from __future__ import annotations

from pathlib import Path

from copilot_cli.core.options import OptionError


def check_output_file(path: Path | None, option: str) -> None:
    if path is not None and path.is_dir():
        raise OptionError(option, f"{path} is a folder; give a file path")


def check_output_folder(path: Path | None, option: str) -> None:
    if path is not None and path.exists() and not path.is_dir():
        raise OptionError(option, f"{path} is a file; give a folder")
