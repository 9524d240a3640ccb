"""A normal install (a wheel, not the clone): the shipped defaults come with the package.

The wheel is built from this checkout and installed with pip into a folder of its own, then
run from another directory with nothing of the clone on its path: `copilot-opt build` on the
shipped example config builds every artifact, and without a config it is exit 2 in one line
naming the flag and the example's installed path. Marked `install` (`make test-install`, run
by CI): building and installing the wheel takes about a minute on 2 cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.install


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("install")
    pip = [sys.executable, "-m", "pip", "-q"]
    wheels, site = root / "wheels", root / "site"
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)],
        check=True,
        cwd=root,
    )
    (wheel,) = wheels.glob("copilot_opt-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True)
    work = root / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "COPILOT_OPT_CACHE_DIR": str(root / "cache")}
    return site, work, env


def _cli(installed, *args):
    _, work, env = installed
    return subprocess.run(
        [sys.executable, "-m", "copilot_cli", *args], cwd=work, env=env, capture_output=True,
        text=True,
    )  # fmt: skip


def test_the_installed_package_reads_its_own_shipped_data(installed):
    site, work, env = installed
    code = "import copilot_cli, copilot_cli.paths as p; print(copilot_cli.__file__, p.DATA_ROOT)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0].startswith(str(site)) and out[1] == str(site / "copilot_cli" / "shipped")


def test_build_of_the_shipped_example_works_from_an_installed_package(installed):
    site, work, _ = installed
    example = site / "copilot_cli" / "shipped" / "copilot-opt.yaml"
    result = _cli(installed, "build", "-c", str(example), "-o", str(work / "build"), "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    built = {p.name for p in (work / "build").iterdir()}
    assert {"templates", "kv", "quant", "chunks", "reports", "build-manifest.json"} <= built, built
    assert (work / "build" / "reports" / "regress.json").is_file()


def test_build_without_a_config_names_what_to_pass(installed):
    site, _, _ = installed
    result = _cli(installed, "build")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--config" in lines[0]
    assert str(site / "copilot_cli" / "shipped" / "copilot-opt.yaml") in lines[0]
