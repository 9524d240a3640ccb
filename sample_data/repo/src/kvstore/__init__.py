"""kvstore: a small sharded key-value cache used as sample data for copilot-opt."""

from kvstore.lru import LRUCache
from kvstore.ttl_cache import TTLCache
from kvstore.sharding import HashRing

__all__ = ["LRUCache", "TTLCache", "HashRing"]
__version__ = "0.4.2"
