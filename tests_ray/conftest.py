"""The Ray tests: a local Ray cluster started by the tests (two CPUs), and the inputs every
command is compared on, run once here without Ray."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COPILOT_OPT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
        yield


@pytest.fixture(scope="session", autouse=True)
def _one_thread() -> None:
    """One torch thread here, so two model replicas fit the two CPUs of the test cluster (the
    replicas run as many threads as the caller: results must not depend on it)."""
    torch.set_num_threads(1)


@pytest.fixture()
def cluster() -> Iterator[object]:
    """A local two-CPU Ray cluster for one test, stopped after it."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def repositories(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ...]:
    """Three repositories of different languages (and one file shared by two of them)."""
    root = tmp_path_factory.mktemp("repos")
    shutil.copytree(REPO / "sample_data" / "repo", root / "sample")
    shutil.copytree(
        REPO / "copilot_cli" / "kv", root / "kvpkg", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(REPO / "docs", root / "docs")
    shutil.copy(REPO / "copilot_cli" / "kv" / "radix.py", root / "docs" / "radix.py")  # a duplicate
    return (root / "sample", root / "kvpkg", root / "docs")


@pytest.fixture(scope="session")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from copilot_cli import CompileOptions, compile_templates

    out = tmp_path_factory.mktemp("bundle") / "bundle"
    compile_templates(CompileOptions(REPO / "templates", out))
    return out


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every non-dot file under `root` (or `root` itself), by relative path."""
    if root.is_file():
        return {root.name: root.read_bytes()}
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    }
