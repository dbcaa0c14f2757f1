"""Ranged reads through the node cache: missing blocks near one another (gaps of at most
GAP_BLOCKS uncached blocks) come in one GET, cached blocks are never fetched again, and the bytes
read are the object's exactly; counted on a real local store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from packer.store.cache.fetching import GAP_BLOCKS, CachedObject, _runs, read_ranges_of
from packer.store.cache.node import NodeCache
from packer.store.local import LocalStore

BLOCK = 16


class CountingStore(LocalStore):
    """A local store that records each ranged GET."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.gets: list[tuple[int, int]] = []

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        self.gets.append((start, stop))
        return super().read_range(key, start, stop)


@pytest.fixture
def obj(tmp_path: Path) -> CachedObject:
    (tmp_path / "store").mkdir()
    data = os.urandom(BLOCK * 20)
    (tmp_path / "store" / "shard").write_bytes(data)
    store = CountingStore(str(tmp_path / "store"))
    return CachedObject(store, "shard", len(data), "ab" * 32, NodeCache(tmp_path / "cache"), block_size=BLOCK)


def test_runs_join_adjacent_and_nearby_missing_blocks() -> None:
    assert _runs([0, 1, 3, 8], gap=0) == [(0, 1), (3, 3), (8, 8)]
    assert _runs([0, 1, 3, 8], gap=4) == [(0, 8)]
    assert _runs([0, 1, 3, 8], gap=2) == [(0, 3), (8, 8)]
    assert _runs([0, 3], cached=lambda block: block == 2, gap=4) == [(0, 0), (3, 3)]  # a cached gap


def test_nearby_records_come_in_one_get_and_read_exactly(obj: CachedObject) -> None:
    data = Path(obj.store.local_path("shard")).read_bytes()  # type: ignore[attr-defined]
    far = BLOCK * (3 + GAP_BLOCKS + 1)  # past the gap from block 2
    ranges = [(1, 10), (2 * BLOCK + 3, 2 * BLOCK + 9), (far, far + 5)]
    assert read_ranges_of(obj, ranges) == [data[a:b] for a, b in ranges]
    store = obj.store
    assert isinstance(store, CountingStore)
    assert sorted(store.gets) == [(0, 3 * BLOCK), (far, far + BLOCK)]  # two GETs, the gap with the first
    store.gets.clear()
    assert read_ranges_of(obj, [(BLOCK + 1, BLOCK + 4)]) == [data[BLOCK + 1:BLOCK + 4]]
    assert store.gets == []  # the gap block came with its neighbours: cached, not fetched again


def test_a_cached_block_in_the_gap_is_not_fetched_again(obj: CachedObject) -> None:
    read_ranges_of(obj, [(BLOCK, BLOCK + 1)])
    store = obj.store
    assert isinstance(store, CountingStore)
    store.gets.clear()
    read_ranges_of(obj, [(0, 1), (2 * BLOCK, 2 * BLOCK + 1)])
    assert sorted(store.gets) == [(0, BLOCK), (2 * BLOCK, 3 * BLOCK)]
