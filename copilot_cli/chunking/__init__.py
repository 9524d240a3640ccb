"""Repository chunking: entity-aligned, token-exact, lossless, deduplicated, ranked.

Names are imported on first use (core/lazy.py): importing `chunking.options` or
`chunking.records` does not load the tokenizer stack."""

from copilot_cli.core.lazy import exports

_WHERE = {
    "chunk_repository": "copilot_cli.chunking.chunker",
    "walk_all": "copilot_cli.chunking.walk",
    "inspect_chunks": "copilot_cli.chunking.format",
    "read_chunks": "copilot_cli.chunking.format",
    "read_pair": "copilot_cli.chunking.format",
    "read_registry": "copilot_cli.chunking.format",
    "ChunkOptions": "copilot_cli.chunking.options",
    "ChunkResult": "copilot_cli.chunking.options",
    "ChunkSummary": "copilot_cli.chunking.options",
    **dict.fromkeys(
        ("Chunk", "ChunksFile", "ChunksHeader", "Entity", "Location", "Registry", "RegistryEntry"),
        "copilot_cli.chunking.records",
    ),
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)
