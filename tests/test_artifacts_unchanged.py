"""Same inputs, same bytes: the shipped inputs give exactly the recorded artifacts."""

import json
from pathlib import Path

from tests.golden.artifacts import environment

GOLDEN = Path(__file__).resolve().parent / "golden"
RECORDED = GOLDEN / "artifact_hashes.json"
RECORDED_ENVIRONMENT = GOLDEN / "artifact_environment.json"


def _drift() -> str:
    """The ways this environment differs from the one the hashes were recorded in, if any."""
    recorded = json.loads(RECORDED_ENVIRONMENT.read_text())
    here = environment()
    diffs = [f"{k} {here.get(k)} (recorded {v})" for k, v in recorded.items() if here.get(k) != v]
    if not diffs:
        return ""
    return "; this environment differs from the recorded one: " + ", ".join(diffs)


def test_artifacts_are_byte_identical_to_the_recorded_set(shipped_artifacts):
    recorded = json.loads(RECORDED.read_text())
    _, built = shipped_artifacts
    assert sorted(built) == sorted(recorded)
    changed = sorted(name for name in recorded if built[name] != recorded[name])
    assert changed == [], f"artifacts changed: {changed}{_drift()}"


def test_the_recorded_environment_names_what_the_bytes_depend_on():
    recorded = json.loads(RECORDED_ENVIRONMENT.read_text())
    assert sorted(recorded) == sorted(environment())
    assert all(isinstance(v, str) and v for v in recorded.values())
