"""KV caches of static prefixes: computed once (shared in a radix tree), shipped, loaded."""

from copilot_cli.kv.assemble import Assembled, StoredPiece, assemble_cache, load_piece
from copilot_cli.kv.builder import PrefillResult, prefill_kv, prefill_sources
from copilot_cli.kv.chunkkv import (
    OPENING_SUFFIX,
    bundle_snippet_format,
    chunk_name,
    chunk_sources,
    context_openings,
)
from copilot_cli.kv.format import KVIndex, ModelGeometry, block_hashes, read_segment
from copilot_cli.kv.geometry import model_geometry
from copilot_cli.kv.inspect import inspect_kv_folder, inspect_kv_segment
from copilot_cli.kv.loader import KVCacheDir, PrefixStore, build_cache, load_prefix
from copilot_cli.kv.options import PrefillOptions, PrefixSource
from copilot_cli.kv.radix import PrefixMatch, RadixTree
from copilot_cli.kv.rope import rerotate, rotary_of, rotary_of_config
from copilot_cli.kv.serving import (
    StoredSnippet,
    assemble_request,
    context_pieces,
    generate_with_prefix,
)
from copilot_cli.kv.slots import FORMAT as SLOTS_FORMAT
from copilot_cli.kv.slots import INDEX as SLOTS_INDEX
from copilot_cli.kv.slots import SLOTS as SLOTS_DIR
from copilot_cli.kv.slots import (
    SlotIndex,
    SlotPrefix,
    inspect_slot_folder,
    verified_slot,
)
from copilot_cli.kv.slots import check_model as check_slot_model
from copilot_cli.kv.slots import read_index as read_slot_index
from copilot_cli.kv.store import DEFAULT_MAX_BYTES, SegmentStore
from copilot_cli.kv.verify import verify_prefixes

__all__ = [
    "DEFAULT_MAX_BYTES",
    "OPENING_SUFFIX",
    "SLOTS_DIR",
    "SLOTS_FORMAT",
    "SLOTS_INDEX",
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
    "SlotIndex",
    "SlotPrefix",
    "StoredPiece",
    "StoredSnippet",
    "assemble_cache",
    "assemble_request",
    "block_hashes",
    "build_cache",
    "bundle_snippet_format",
    "check_slot_model",
    "chunk_name",
    "chunk_sources",
    "context_openings",
    "context_pieces",
    "generate_with_prefix",
    "inspect_kv_folder",
    "inspect_kv_segment",
    "inspect_slot_folder",
    "load_piece",
    "load_prefix",
    "model_geometry",
    "prefill_kv",
    "prefill_sources",
    "read_segment",
    "read_slot_index",
    "rerotate",
    "rotary_of",
    "rotary_of_config",
    "verified_slot",
    "verify_prefixes",
]
