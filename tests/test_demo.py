"""`make demo`, the README's one command for the main job: it builds every artifact of the
shipped defaults and says what it did (the time-to-first-token saving measured on the spot);
a build that refuses its folder ends with the build's one-line error and exit 2, no traceback.
Slow (a whole build and 48 timed forwards): `make test-slow`, which CI runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[1] / "scripts" / "demo.py"


def _demo(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(DEMO), str(out)], capture_output=True, text=True, timeout=900
    )


@pytest.mark.slow
def test_the_demo_builds_everything_and_says_what_it_did(tmp_path):
    done = _demo(tmp_path / "build")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    for line in (
        "- templates compiled: 6",
        "- prefix tokens cached:",
        "- time to first token for",
        "- embedding bytes saved:",
        "- chunk:repo:",
        "- regress verdict: pass",
    ):
        assert line in done.stdout, (line, done.stdout)
    assert (tmp_path / "build" / "build-manifest.json").is_file()


@pytest.mark.slow
def test_a_refused_build_folder_ends_the_demo_with_the_builds_error(tmp_path):
    out = tmp_path / "build"
    (out / "lib").mkdir(parents=True)  # what a setuptools build in the clone used to leave
    done = _demo(out)
    assert done.returncode == 2
    assert "holds files copilot-opt did not write (lib)" in done.stderr
    assert "Traceback" not in done.stderr and "Summary" not in done.stdout
