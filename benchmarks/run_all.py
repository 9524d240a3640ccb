"""Run every benchmarks/bench_*.py, collect their JSON lines, rewrite benchmarks/RESULTS.md.

    python benchmarks/run_all.py [NAME_SUBSTRING ...]
    python benchmarks/run_all.py --ingest bench_NAME.py OUTPUT_FILE

With names, only matching benchmarks run and only their rows are replaced in RESULTS.md.
`--ingest` takes the rows of a benchmark run by hand (its stdout, saved) instead of running it.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
STORE = HERE / "results.json"


def interpreter(script: Path) -> str:
    """The Python a benchmark runs with: a `# venv: NAME` line picks that environment (vLLM
    lives in its own), else this one."""
    for line in script.read_text().splitlines()[:40]:
        if line.startswith("# venv: "):
            python = HERE.parent / line.split(":", 1)[1].strip() / "bin" / "python"
            return str(python) if python.exists() else ""
    return sys.executable


def result_rows(script: str, stdout: str) -> list[dict]:
    rows = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            if {"name", "ours", "peer", "unit", "ratio"} <= row.keys():
                row["script"] = script
                rows.append(row)
                print(line, flush=True)
    return rows


def run(script: Path) -> list[dict]:
    print(f"== {script.name}", file=sys.stderr, flush=True)
    python = interpreter(script)
    if not python:
        print(f"   skipped: its environment is missing (see {script.name})", file=sys.stderr)
        return []
    proc = subprocess.run(
        [python, str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "COPILOT_OPT_QUIET": "1"},
    )
    rows = result_rows(script.name, proc.stdout)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        rows.append(
            {
                "script": script.name,
                "name": f"{script.stem} FAILED",
                "ours": 0,
                "peer": 0,
                "unit": "",
                "ratio": 0,
                "pass": False,
            }
        )
    return rows


def render(rows: list[dict], meta: dict) -> str:
    lines = [
        "# Benchmark results",
        "",
        "Written by `make bench` (benchmarks/run_all.py). `ratio` = how many times better ours is",
        "than the peer (peer/ours for times and sizes, ours/peer for throughputs). Ours and peer",
        "run side by side in one process run on the same machine; absolute numbers are for",
        "orientation only.",
        "",
        f"Machine: {meta['machine']}; Python {meta['python']}; torch {meta['torch']}; "
        f"run {meta['date']}.",
        "",
        "| benchmark | ours | peer | unit | ratio | goal | pass | script |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        passed = {True: "yes", False: "**no**", None: ""}[row.get("pass")]
        lines.append(
            f"| {row['name']} | {row['ours']} | {row['peer']} | {row['unit']} | "
            f"{row['ratio']} | {row.get('goal', '')} | {passed} | {row['script']} |"
        )
    notes = [row for row in rows if row.get("note")]
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {row['name']}: {row['note']}" for row in notes]
    return "\n".join(lines) + "\n"


def main() -> None:
    wanted = sys.argv[1:]
    ingest = wanted[:1] == ["--ingest"]
    scripts = sorted(HERE.glob("bench_*.py"))
    if ingest:
        scripts = [HERE / wanted[1]]
    elif wanted:
        scripts = [s for s in scripts if any(w in s.name for w in wanted)]
    previous = json.loads(STORE.read_text()) if STORE.exists() and wanted else []
    rerun = {s.name for s in scripts}
    rows = [r for r in previous if r["script"] not in rerun]
    if ingest:
        rows.extend(result_rows(wanted[1], Path(wanted[2]).read_text()))
    for script in [] if ingest else scripts:
        rows.extend(run(script))
    rows.sort(key=lambda r: r["script"])
    import torch

    meta = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    STORE.write_text(json.dumps(rows, indent=2) + "\n")
    RESULTS.write_text(render(rows, meta))
    print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
