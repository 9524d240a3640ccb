"""chunk re-run on an unchanged repository (per-file cache) vs the first run, same corpus.

Corpus: the interpreter's Python standard library (*.py outside site-packages). The cache lives
in a temporary COPILOT_OPT_CACHE_DIR so the first run is really cold.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["COPILOT_OPT_CACHE_DIR"] = str(Path(tmp) / "cache")
        from copilot_cli.chunking import ChunkOptions, chunk_repository
        from copilot_cli.core.models import SHIPPED_MODEL, load_tokenizer

        stdlib = Path(sysconfig.get_paths()["stdlib"])
        root = Path(tmp) / "corpus"
        for path in sorted(stdlib.rglob("*.py")):
            if "site-packages" in path.parts or not path.is_file():
                continue
            dest = root / path.relative_to(stdlib)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
        tokenizer = load_tokenizer(str(SHIPPED_MODEL))
        options = ChunkOptions(repos=(root,), out=Path(tmp) / "a.jsonl")
        started = time.perf_counter()
        chunk_repository(options, tokenizer)
        first = time.perf_counter() - started
        started = time.perf_counter()
        result = chunk_repository(ChunkOptions(repos=(root,), out=Path(tmp) / "b.jsonl"), tokenizer)
        second = time.perf_counter() - started
        same = (Path(tmp) / "a.jsonl").read_bytes() == (Path(tmp) / "b.jsonl").read_bytes()
    emit(
        "chunk re-run on an unchanged repository vs first run",
        second,
        first,
        "s",
        goal="ratio >= 10",
        passed=first / second >= 10 and same,
        note=f"{result.summary.files} files, {result.summary.cache_hits} cache hits, "
        f"identical output: {same}"
        + (
            ""
            if first / second >= 10
            else f"; not met: the re-run reads {result.summary.cache_hits} cache entries and "
            f"writes {result.summary.chunks_written} JSON lines again; the first run is "
            f"{first:.1f} s since chunking counts tokens from a cache of pre-token pieces"
        ),
    )


if __name__ == "__main__":
    main()
