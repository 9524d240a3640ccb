"""Repository chunking: entity-aligned, token-exact, lossless, deduplicated, ranked."""

from copilot_cli.chunking.chunker import chunk_repository, walk_all
from copilot_cli.chunking.format import inspect_chunks, read_chunks, read_pair, read_registry
from copilot_cli.chunking.options import ChunkOptions, ChunkResult, ChunkSummary
from copilot_cli.chunking.records import (
    Chunk,
    ChunksFile,
    ChunksHeader,
    Entity,
    Location,
    Registry,
    RegistryEntry,
)

__all__ = [
    "Chunk",
    "ChunkOptions",
    "ChunkResult",
    "ChunkSummary",
    "ChunksFile",
    "ChunksHeader",
    "Entity",
    "Location",
    "Registry",
    "RegistryEntry",
    "chunk_repository",
    "inspect_chunks",
    "read_chunks",
    "read_pair",
    "read_registry",
    "walk_all",
]
