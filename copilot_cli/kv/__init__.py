"""KV caches of static prefixes: computed once (shared in a radix tree), shipped, loaded."""

from copilot_cli.kv.assemble import Assembled, StoredPiece, assemble_cache, load_piece
from copilot_cli.kv.builder import PrefillResult, prefill_kv, prefill_sources
from copilot_cli.kv.format import KVIndex, ModelGeometry, block_hashes, read_segment
from copilot_cli.kv.geometry import model_geometry
from copilot_cli.kv.inspect import inspect_kv_folder, inspect_kv_segment
from copilot_cli.kv.loader import KVCacheDir, PrefixStore, build_cache, load_prefix
from copilot_cli.kv.options import PrefillOptions, PrefixSource
from copilot_cli.kv.radix import PrefixMatch, RadixTree
from copilot_cli.kv.serving import assemble_request, generate_with_prefix
from copilot_cli.kv.store import DEFAULT_MAX_BYTES, SegmentStore
from copilot_cli.kv.verify import verify_prefixes

__all__ = [
    "DEFAULT_MAX_BYTES",
    "Assembled",
    "KVCacheDir",
    "KVIndex",
    "ModelGeometry",
    "PrefillOptions",
    "PrefillResult",
    "PrefixMatch",
    "PrefixSource",
    "PrefixStore",
    "RadixTree",
    "SegmentStore",
    "StoredPiece",
    "assemble_cache",
    "assemble_request",
    "block_hashes",
    "build_cache",
    "generate_with_prefix",
    "inspect_kv_folder",
    "inspect_kv_segment",
    "load_piece",
    "load_prefix",
    "model_geometry",
    "prefill_kv",
    "prefill_sources",
    "read_segment",
    "verify_prefixes",
]
