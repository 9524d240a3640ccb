"""Record the hashes of every deterministic artifact (tests/golden/artifact_hashes.json).

Run it only when an artifact is meant to change (a format version, a fingerprint scheme), and
say so in the commit: tests/test_artifacts_unchanged.py holds every refactor to these bytes.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.golden.artifacts import build_all, environment, kv_values  # noqa: E402

if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        hashes = build_all(Path(tmp))
        values = kv_values(Path(tmp) / "kv")
    target = ROOT / "tests" / "golden" / "artifact_hashes.json"
    target.write_text(json.dumps(hashes, indent=2, sort_keys=True) + "\n")
    (target.parent / "kv_values.json").write_text(
        json.dumps(values, indent=1, sort_keys=True) + "\n"
    )
    (target.parent / "artifact_environment.json").write_text(
        json.dumps(environment(), indent=2, sort_keys=True) + "\n"
    )
    print(f"{len(hashes)} files recorded in {target.relative_to(ROOT)}")
