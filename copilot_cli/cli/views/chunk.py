"""The chunk summary as a table."""

from __future__ import annotations

from copilot_cli.chunking.options import ChunkResult
from copilot_cli.cli.common import key_value_table, stdout_console


def show(result: ChunkResult, max_tokens: int) -> None:
    s = result.summary
    rows = [
        ("output", result.out),
        ("files", s.files),
        (
            "chunks",
            f"{s.chunks_written} written of {s.chunks_total} ({s.exact_duplicates_folded} exact "
            f"duplicates folded, {s.near_duplicates_marked} near-duplicates marked)",
        ),
        ("repeated spans", s.repeated_spans),
        ("largest chunk", f"{s.max_chunk_tokens} tokens (budget {max_tokens})"),
        ("languages", ", ".join(f"{k} {v}" for k, v in s.languages.items())),
        (
            "fallback / parse errors / non-UTF-8",
            f"{len(s.fallback_files)} / {len(s.parse_errors)} / {len(s.non_utf8_files)}",
        ),
        ("skipped", ", ".join(f"{k} {v}" for k, v in s.skipped.items()) or "none"),
        ("cache hits", s.cache_hits),
        ("seconds", s.seconds),
    ]
    stdout_console.print(key_value_table("chunk", rows))
