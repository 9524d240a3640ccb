"""KV caches of static prefixes: computed once (shared in a radix tree), shipped, loaded."""

from copilot_cli.kv.builder import PrefillResult, PrefixSource, prefill_kv, prefill_sources
from copilot_cli.kv.format import block_hashes
from copilot_cli.kv.loader import KVCacheDir, PrefixStore, build_cache, load_prefix
from copilot_cli.kv.options import PrefillOptions
from copilot_cli.kv.serving import generate_with_prefix
from copilot_cli.kv.verify import verify_prefixes

__all__ = [
    "KVCacheDir",
    "PrefillOptions",
    "PrefillResult",
    "PrefixSource",
    "PrefixStore",
    "block_hashes",
    "build_cache",
    "generate_with_prefix",
    "load_prefix",
    "prefill_kv",
    "prefill_sources",
    "verify_prefixes",
]
