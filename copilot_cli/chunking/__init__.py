"""Repository chunking: entity-aligned, token-exact, lossless, deduplicated, ranked."""

from copilot_cli.chunking.chunker import ChunkOptions, ChunkResult, chunk_repository

__all__ = ["ChunkOptions", "ChunkResult", "chunk_repository"]
