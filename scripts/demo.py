"""`make demo`: run the main job on the shipped defaults and say where the artifacts are.

Runs every command that exists, in pipeline order, through the real CLI.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "demo"


def run(*args: str) -> None:
    print(f"\n$ copilot-opt {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, "-m", "copilot_cli", *args], check=True, cwd=ROOT)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    run("model-info")
    print(f"\nArtifacts: {OUT}")


if __name__ == "__main__":
    main()
