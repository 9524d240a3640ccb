import pytest

from kvstore.lru import LRUCache


def test_get_marks_recent():
    cache = LRUCache(max_entries=2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert "b" not in cache
    assert list(cache) == ["a", "c"]


def test_byte_bound_evicts_oldest_first():
    evicted = []
    cache = LRUCache(max_entries=100, max_bytes=10, on_evict=lambda k, v: evicted.append(k))
    cache.put("x", b"12345")
    cache.put("y", b"12345")
    cache.put("z", b"1")
    assert evicted == ["x"]
    assert cache.total_bytes == 6


def test_value_larger_than_cache_is_refused():
    cache = LRUCache(max_bytes=4)
    with pytest.raises(ValueError):
        cache.put("big", b"12345")


def test_resize_evicts():
    cache = LRUCache(max_entries=10)
    for i in range(10):
        cache.put(i, i)
    assert cache.resize(3) == 7
    assert list(cache) == [7, 8, 9]


def test_stats_hit_rate():
    cache = LRUCache()
    cache.put("k", "v")
    cache.get("k")
    cache.get("missing")
    assert cache.stats.hit_rate == 0.5
