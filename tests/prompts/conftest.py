from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from transformers import AutoTokenizer

from copilot_cli.core.models import SHIPPED_MODEL


@pytest.fixture(scope="session")
def tokenizer():
    return AutoTokenizer.from_pretrained(SHIPPED_MODEL)


def write_template(
    folder: Path,
    filename: str,
    body: str,
    *,
    name: str | None = None,
    inputs: dict | None = None,
    samples: list | None = None,
    fmt: str | None = None,
) -> Path:
    """Write a template file with front matter built from the arguments."""
    front = {
        "name": name or filename.removesuffix(".j2"),
        "description": "test template",
        "version": "1.0.0",
        "inputs": inputs
        if inputs is not None
        else {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
        "samples": samples if samples is not None else [{"x": "value"}],
    }
    if fmt:
        front["format"] = fmt
    path = folder / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "---\n" + yaml.safe_dump(front, sort_keys=False) + "---\n" + body, encoding="utf-8"
    )
    return path


@pytest.fixture()
def template_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "templates"
    folder.mkdir()
    return folder
