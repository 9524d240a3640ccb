"""Repository chunking: entity-aligned, token-exact, lossless, deduplicated, ranked."""

from copilot_cli.chunking.chunker import chunk_repository, walk_all
from copilot_cli.chunking.format import inspect_chunks, read_chunks, read_registry
from copilot_cli.chunking.options import ChunkOptions, ChunkResult, ChunkSummary

__all__ = [
    "ChunkOptions",
    "ChunkResult",
    "ChunkSummary",
    "chunk_repository",
    "inspect_chunks",
    "read_chunks",
    "read_registry",
    "walk_all",
]
