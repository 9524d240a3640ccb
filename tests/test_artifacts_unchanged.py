"""Same inputs, same bytes: the shipped inputs give exactly the recorded artifacts."""

import json
from pathlib import Path

RECORDED = Path(__file__).resolve().parent / "golden" / "artifact_hashes.json"


def test_artifacts_are_byte_identical_to_the_recorded_set(shipped_artifacts):
    recorded = json.loads(RECORDED.read_text())
    _, built = shipped_artifacts
    assert sorted(built) == sorted(recorded)
    changed = sorted(name for name in recorded if built[name] != recorded[name])
    assert changed == [], f"artifacts changed: {changed}"
