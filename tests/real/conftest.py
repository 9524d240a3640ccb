"""Tests on the real instruments (copilot_cli.instruments): every module here sets
`pytestmark = pytest.mark.real` (run by `make test-real`, which fetches and prepares them
first; `make test` leaves them out)."""

from __future__ import annotations

from pathlib import Path

import pytest

from copilot_cli import instruments


@pytest.fixture(scope="session", autouse=True)
def _instruments():
    if not instruments.available():
        pytest.skip(f"no real instruments in {instruments.root()} (make real-models)")


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    return instruments.root() / instruments.SMOLLM2


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    return instruments.root() / instruments.SMOLLM2_GGUF


@pytest.fixture(scope="session")
def smollm2(smollm2_dir):
    from copilot_cli.core.models import ModelSpec, load_model

    return load_model(ModelSpec(str(smollm2_dir)))
