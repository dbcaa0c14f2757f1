"""Ranged reads through the node cache: missing blocks near one another (gaps of at most
GAP_BYTES of uncached blocks) come in one GET, cached blocks are never fetched again, and the bytes
read are the object's exactly; counted on a real local store."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from packer.store.cache.fetching import GAP_BYTES, CachedObject, _runs, read_ranges_of
from packer.store.cache.node import NodeCache
from packer.store.local import LocalStore

#: Blocks of a fifth of the gap: GAP_BLOCKS missing blocks between two wanted ones join them.
GAP_BLOCKS = 4
BLOCK = GAP_BYTES // (GAP_BLOCKS + 1)


class CountingStore(LocalStore):
    """A local store that records each ranged GET."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.gets: list[tuple[int, int]] = []
        self.slow: dict[int, float] = {}  # seconds a GET from this offset takes

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        self.gets.append((start, stop))
        time.sleep(self.slow.get(start, 0.0))
        return super().read_range(key, start, stop)


@pytest.fixture
def obj(tmp_path: Path) -> CachedObject:
    (tmp_path / "store").mkdir()
    data = os.urandom(BLOCK * 20)
    (tmp_path / "store" / "shard").write_bytes(data)
    store = CountingStore(str(tmp_path / "store"))
    cache = NodeCache(tmp_path / "cache")
    cached = CachedObject(store, "shard", len(data), "ab" * 32, cache, block_size=BLOCK)
    assert cached.gap_blocks == GAP_BLOCKS
    return cached


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


def test_a_run_whose_first_block_another_process_fetched_comes_in_runs(obj: CachedObject) -> None:
    # The race: this process saw blocks 0-5 missing, another fetched a shorter run from block 0
    # (0 and 3 here) before this one took block 0's lock. The rest comes in runs, not block by block.
    data = Path(obj.store.local_path("shard")).read_bytes()  # type: ignore[attr-defined]
    read_ranges_of(obj, [(0, 1)])
    read_ranges_of(obj, [(3 * BLOCK, 3 * BLOCK + 1)])
    store = obj.store
    assert isinstance(store, CountingStore)
    store.gets.clear()
    blocks = obj._fetch_run(0, 5)
    assert sorted(blocks) == list(range(6))
    assert sorted(store.gets) == [(BLOCK, 3 * BLOCK), (4 * BLOCK, 6 * BLOCK)]
    assert obj.read_range(0, 6 * BLOCK, blocks) == data[:6 * BLOCK]


def test_blocks_evicted_before_they_are_read_come_back_in_one_get(obj: CachedObject) -> None:
    # A cache far below the reads in flight may evict a batch's blocks between its lookup and
    # its reads: the evicted blocks are fetched again together, once.
    data = Path(obj.store.local_path("shard")).read_bytes()  # type: ignore[attr-defined]
    read_ranges_of(obj, [(0, 4 * BLOCK)])
    files = obj.cached_blocks(range(4))
    for path in files.values():
        assert isinstance(path, str)
        os.unlink(path)
    store = obj.store
    assert isinstance(store, CountingStore)
    store.gets.clear()
    assert [obj.read_range(b * BLOCK, (b + 1) * BLOCK, files) for b in range(4)] == [
        data[b * BLOCK:(b + 1) * BLOCK] for b in range(4)]
    assert store.gets == [(0, 4 * BLOCK)]


def test_the_gap_is_at_most_a_64th_of_the_cache(tmp_path: Path) -> None:
    store = LocalStore(str(tmp_path))

    def gap(limit: int | None, block: int) -> int:
        return CachedObject(store, "k", 1 << 30, "cd" * 32, NodeCache(tmp_path / "c", limit=limit),
                            block_size=block).gap_blocks

    assert gap(None, 256 << 10) == 3  # a MiB: three blocks between two wanted ones
    assert gap(None, 16 << 10) == 63
    assert gap(64 << 20, 16 << 10) == 63
    assert gap(6 << 20, 16 << 10) == 5  # 96 KiB of a 6 MiB cache
    assert gap(1 << 20, 16 << 10) == 0


def test_overlapping_runs_split_the_blocks_instead_of_fetching_them_twice(obj: CachedObject) -> None:
    # Another fetcher (a thread here: flock holds between open files) is fetching block 3,
    # slowly, when this one wants blocks 0-5: it fetches 0-2, waits for block 3, then fetches 4-5.
    data = Path(obj.store.local_path("shard")).read_bytes()  # type: ignore[attr-defined]
    store = obj.store
    assert isinstance(store, CountingStore)
    store.slow[3 * BLOCK] = 0.5
    other = threading.Thread(target=obj._fetch_run, args=(3, 3))
    other.start()
    while not store.gets:
        time.sleep(0.01)
    blocks = obj._fetch_run(0, 5)
    other.join()
    assert sorted(store.gets) == [(0, 3 * BLOCK), (3 * BLOCK, 4 * BLOCK), (4 * BLOCK, 6 * BLOCK)]
    assert obj.read_range(0, 6 * BLOCK, blocks) == data[:6 * BLOCK]
    assert sorted(obj.cached_blocks(range(6))) == list(range(6))
