"""Write sample_data/sessions.jsonl (git-ignored): a generated request log (fixed seed) over
the shipped templates and sample repository, as `copilot-opt warm-plan` reads it. The tests
generate their own copy (the same bytes) with `write_sessions`.

    python scripts/generate_sessions.py [--out sample_data/sessions.jsonl] [--sessions 300]

The chunk ids are those `chunk` gives the sample repository with the shipped tokenizer, so the
log can be planned against `build/chunks/repo.jsonl` and `build/kv` of `make demo`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_sessions(out: Path, sessions: int = 300, seed: int = 7) -> int:
    """Generate the log into `out`; returns the number of requests."""
    from copilot_cli.chunking import ChunkOptions, chunk_repository
    from copilot_cli.warm.sessions import (
        SHIPPED_TEMPLATES,
        SessionConfig,
        generate_sessions,
        repositories_from_chunks,
    )

    with tempfile.TemporaryDirectory() as tmp:
        chunks = Path(tmp) / "chunks.jsonl"
        chunk_repository(
            ChunkOptions(repos=(ROOT / "sample_data" / "repo",), out=chunks, use_cache=False)
        )
        repositories = repositories_from_chunks(chunks)
    config = SessionConfig(seed=seed, sessions=sessions)
    requests = generate_sessions(list(SHIPPED_TEMPLATES), repositories, config)
    start = 1_764_748_800.0  # 2025-12-03 08:00 UTC: logs carry wall-clock seconds
    lines = [
        json.dumps({**r.to_dict(), "t": round(start + r.t, 3)}, sort_keys=True) + "\n"
        for r in requests
    ]
    out.write_text("".join(lines))
    return len(requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "sample_data" / "sessions.jsonl")
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    count = write_sessions(args.out, args.sessions, args.seed)
    print(f"{count} requests of {args.sessions} sessions written to {args.out}")


if __name__ == "__main__":
    main()
