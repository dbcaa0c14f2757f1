"""The node cache (packer.store.cache.node): crash-safe writes, one download per key per node, the bound
and its LRU eviction, readers that survive eviction, and several processes sharing one directory."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pytest

from packer.errors import CacheError, IntegrityError, StoreError
from packer.store.cache.node import DEFAULT_MIN_FREE, CacheInfo, NodeCache, default_cache_dir

KB = 1000


def payload(key: str, size: int) -> bytes:
    """Deterministic bytes for `key`."""
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def writer(data: bytes) -> Callable[[BinaryIO], None]:
    def download(out: BinaryIO) -> None:
        out.write(data)
    return download


def fill(cache: NodeCache, key: str, size: int = KB) -> str:
    return cache.fetch(key, size, writer(payload(key, size)))


def temps(directory: Path) -> list[str]:
    folder = directory / "v1" / "tmp"
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def age(cache: NodeCache, key: str, seconds_ago: float) -> None:
    """Set `key`'s last use `seconds_ago` seconds back."""
    stamp = time.time() - seconds_ago
    os.utime(os.path.join(cache.directory, "v1", "entries", key), (stamp, stamp))


@pytest.fixture
def cache(tmp_path: Path) -> NodeCache:
    return NodeCache(tmp_path / "cache", min_free=0)


# -- the basics -----------------------------------------------------------------------------------


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PACKER_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == str(tmp_path / "explicit")
    monkeypatch.delenv("PACKER_CACHE")
    assert default_cache_dir() == str(tmp_path / "xdg" / "packer")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == str(tmp_path / "home" / ".cache" / "packer")
    assert NodeCache().directory == default_cache_dir()


def test_construction_parses_sizes_and_creates_nothing(tmp_path: Path) -> None:
    cache = NodeCache(tmp_path / "c", limit="50GB")
    assert (cache.limit, cache.min_free) == (50 * 1000**3, DEFAULT_MIN_FREE)
    assert NodeCache(tmp_path / "c", limit=123, min_free="1KiB").min_free == 1024
    assert NodeCache(tmp_path / "c", min_free=None).min_free == 0
    assert os.path.isabs(NodeCache("relative").directory)
    with pytest.raises(ValueError, match="invalid size"):
        NodeCache(tmp_path / "c", limit="lots")
    assert not (tmp_path / "c").exists()
    assert NodeCache(tmp_path / "c").lookup("a") is None
    assert NodeCache(tmp_path / "c").info() == CacheInfo(str(tmp_path / "c"), 0, 0, None,
                                                          NodeCache(tmp_path / "c").info().free_bytes, None)
    assert NodeCache(tmp_path / "c").clear() == (0, 0) and NodeCache(tmp_path / "c").evict_to(0) == 0
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("key", ["", "/a", "a/", "a//b", "..", "../x", "a/../b", "a/./b", ".",
                                 "a b", "a\\b", "é", "a\nb"])
def test_malformed_keys_are_refused(cache: NodeCache, key: str) -> None:
    with pytest.raises(ValueError, match="invalid cache key"):
        cache.lookup(key)
    with pytest.raises(ValueError, match="invalid cache key"):
        fill(cache, key)


def test_fetch_then_lookup_and_layout(cache: NodeCache, tmp_path: Path) -> None:
    calls: list[int] = []

    def download(out: BinaryIO) -> None:
        calls.append(1)
        out.write(b"x" * 10)

    assert cache.lookup("3f2a9c0b7d1e4a65/b/000123") is None
    path = cache.fetch("3f2a9c0b7d1e4a65/b/000123", 10, download)
    assert path == str(tmp_path / "cache" / "v1" / "entries" / "3f2a9c0b7d1e4a65" / "b" / "000123")
    assert Path(path).read_bytes() == b"x" * 10
    assert cache.lookup("3f2a9c0b7d1e4a65/b/000123") == path
    assert cache.fetch("3f2a9c0b7d1e4a65/b/000123", 10, download) == path
    assert calls == [1]
    assert fill(cache, "3f2a9c0b7d1e4a65.lmdb", 0).endswith("3f2a9c0b7d1e4a65.lmdb")
    Path(path).write_bytes(b"short")  # not our doing, but an entry of another size is fetched again
    assert Path(cache.fetch("3f2a9c0b7d1e4a65/b/000123", 10, download)).read_bytes() == b"x" * 10
    assert calls == [1, 1]
    assert temps(tmp_path / "cache") == []


def test_lookup_bumps_last_use_at_most_once_a_second(cache: NodeCache) -> None:
    path = fill(cache, "k")
    age(cache, "k", 0.2)
    before = os.stat(path).st_mtime
    cache.lookup("k")
    assert os.stat(path).st_mtime == before
    age(cache, "k", 100)
    cache.lookup("k")
    assert time.time() - os.stat(path).st_mtime < 5


# -- crash-safe writes ----------------------------------------------------------------------------


def test_wrong_size_raises_integrity_error_and_leaves_nothing(cache: NodeCache, tmp_path: Path) -> None:
    with pytest.raises(IntegrityError, match="'k'.*wrote 3 bytes, 4 expected") as caught:
        cache.fetch("k", 4, writer(b"abc"))
    assert isinstance(caught.value, StoreError)
    assert cache.lookup("k") is None and temps(tmp_path / "cache") == []
    assert Path(cache.fetch("k", 3, writer(b"abc"))).read_bytes() == b"abc"


def test_failed_check_or_download_leaves_nothing(cache: NodeCache, tmp_path: Path) -> None:
    seen: list[bytes] = []

    def check(temp: str) -> None:
        assert os.path.dirname(temp) == str(tmp_path / "cache" / "v1" / "tmp")
        seen.append(Path(temp).read_bytes())
        raise RuntimeError("digest mismatch")

    with pytest.raises(RuntimeError, match="digest mismatch"):
        cache.fetch("k", 3, writer(b"abc"), check=check)
    assert seen == [b"abc"]

    def broken(out: BinaryIO) -> None:
        out.write(b"a")
        raise ConnectionResetError("peer went away")

    with pytest.raises(ConnectionResetError):
        cache.fetch("k", 3, broken)
    assert cache.lookup("k") is None and temps(tmp_path / "cache") == []
    assert cache.fetch("k", 3, writer(b"abc"), check=lambda temp: None)
    assert cache.info().num_bytes == 3


KILLED_WRITER = textwrap.dedent("""
    import sys, time
    from packer.store.cache.node import NodeCache

    def download(out):
        out.write(b"half")
        out.flush()
        open(sys.argv[2], "w").close()
        time.sleep(60)

    NodeCache(sys.argv[1], min_free=0).fetch("victim", 8, download)
""")


@pytest.mark.slow
def test_a_killed_download_leaves_only_a_temp_file_that_is_swept(cache: NodeCache, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, cache.directory, str(marker)])
    try:
        deadline = time.monotonic() + 30
        while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert cache.lookup("victim") is None
    assert len(temps(tmp_path / "cache")) == 1
    assert cache.info().entries == 0
    assert cache.clear() == (0, 0)
    assert temps(tmp_path / "cache") == []
    assert Path(fill(cache, "victim", 8)).read_bytes() == payload("victim", 8)


def test_stale_temps_are_swept_and_live_ones_kept(cache: NodeCache, tmp_path: Path) -> None:
    fill(cache, "a")
    folder = tmp_path / "cache" / "v1" / "tmp"
    old, foreign = folder / "old.5.x.1.y", folder / "0123.7.othernamespace.1.abcd"
    old.write_bytes(b"")
    foreign.write_bytes(b"")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    cache.evict_to(10**9)
    assert temps(tmp_path / "cache") == [foreign.name]  # another pid namespace's pid: judged by age only


# -- single flight --------------------------------------------------------------------------------


def _single_flight_worker(directory: str, counter: str, barrier: object, results: object) -> None:
    def download(out: BinaryIO) -> None:
        with open(counter, "a") as tally:
            tally.write("1\n")
        time.sleep(0.3)
        out.write(payload("shared/key", 50 * KB))

    barrier.wait()  # type: ignore[attr-defined]
    path = NodeCache(directory, limit="1MB", min_free=0).fetch("shared/key", 50 * KB, download)
    with open(path, "rb") as handle:
        results.put(hashlib.sha256(handle.read()).hexdigest())  # type: ignore[attr-defined]


@pytest.mark.slow
def test_concurrent_fetches_of_one_key_download_once(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(4), context.Queue()
    counter = tmp_path / "downloads"
    workers = [context.Process(target=_single_flight_worker,
                               args=(str(tmp_path / "cache"), str(counter), barrier, results))
               for _ in range(4)]
    for worker in workers:
        worker.start()
    digests = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert counter.read_text() == "1\n"
    assert digests == [hashlib.sha256(payload("shared/key", 50 * KB)).hexdigest()] * 4


# -- the bound and LRU eviction -------------------------------------------------------------------


def test_the_bound_evicts_least_recently_used_first(tmp_path: Path) -> None:
    cache = NodeCache(tmp_path / "cache", limit=10 * KB, min_free=0)
    for number in range(10):
        fill(cache, f"k{number}")
        age(cache, f"k{number}", 1000 - number)  # k0 is the least recently used
    assert cache.info().num_bytes == 10 * KB
    assert cache.lookup("k0")  # now the most recently used
    fill(cache, "new")
    info = cache.info()
    assert info.num_bytes <= 10 * KB and info.entries < 10
    assert cache.lookup("k0") and cache.lookup("new") and cache.lookup("k9")
    assert cache.lookup("k1") is None and cache.lookup("k2") is None


def test_an_entry_larger_than_the_limit_is_kept_alone_until_room_is_needed(tmp_path: Path) -> None:
    cache = NodeCache(tmp_path / "cache", limit=2 * KB, min_free=0)
    fill(cache, "a")
    fill(cache, "big", 5 * KB)
    assert cache.lookup("a") is None and cache.lookup("big")
    assert cache.info().num_bytes == 5 * KB
    fill(cache, "b")
    assert cache.lookup("big") is None and cache.lookup("b")


def test_the_free_space_floor(tmp_path: Path) -> None:
    roomy = NodeCache(tmp_path / "cache", min_free=0)
    fill(roomy, "a")
    impossible = NodeCache(tmp_path / "cache", min_free="1000000TB")
    with pytest.raises(CacheError, match="cannot keep .* free") as caught:
        fill(impossible, "b")
    message = str(caught.value)
    assert str(tmp_path / "cache") in message and "PACKER_CACHE" in message
    assert "cache_limit=" in message and "packer cache clear" in message
    assert isinstance(caught.value, OSError)
    assert roomy.info().entries == 0  # everything was evicted trying
    assert temps(tmp_path / "cache") == []


def test_a_full_disk_evicts_and_retries_once(tmp_path: Path) -> None:
    cache = NodeCache(tmp_path / "cache", min_free=0)
    for number in range(4):
        fill(cache, f"k{number}")
    attempts: list[int] = []

    def download_once_full(out: BinaryIO) -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        out.write(b"abc")

    assert Path(cache.fetch("new", 3, download_once_full)).read_bytes() == b"abc"
    assert len(attempts) == 2
    assert cache.info().num_bytes <= 2 * KB + 3  # the cache was halved

    def always_full(out: BinaryIO) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CacheError, match="ran out of disk space fetching 'other'"):
        cache.fetch("other", 3, always_full)
    assert temps(tmp_path / "cache") == []


def test_eviction_never_breaks_an_open_reader(cache: NodeCache) -> None:
    data = payload("k", 300 * KB)
    path = cache.fetch("k", len(data), writer(data))
    with open(path, "rb") as handle:
        head = handle.read(1000)
        assert cache.evict_to(0) == len(data)
        assert cache.lookup("k") is None and not os.path.exists(path)
        assert head + handle.read() == data


def test_info_and_clear_older_than(cache: NodeCache, tmp_path: Path) -> None:
    for key, seconds_ago in (("x/old", 500), ("x/older", 900), ("y/new", 0)):
        fill(cache, key)
        age(cache, key, seconds_ago)
    info = cache.info()
    assert (info.directory, info.entries, info.num_bytes, info.limit) == (cache.directory, 3, 3 * KB, None)
    assert info.free_bytes > 0 and info.oldest is not None
    assert time.time() - info.oldest == pytest.approx(900, abs=5)
    assert cache.clear(older_than=100) == (2, 2 * KB)
    assert not (tmp_path / "cache" / "v1" / "entries" / "x").exists()  # emptied folders go too
    assert cache.lookup("y/new") and cache.info().entries == 1
    assert cache.clear() == (1, KB)
    assert cache.info().oldest is None and fill(cache, "x/old")


def test_a_lost_or_damaged_usage_count_is_rebuilt(tmp_path: Path) -> None:
    cache = NodeCache(tmp_path / "cache", limit=5 * KB, min_free=0)
    for number in range(4):
        fill(cache, f"k{number}")
    (tmp_path / "cache" / "v1" / "usage").write_text("garbage")
    fill(cache, "k4")
    fill(cache, "k5")
    assert cache.info().num_bytes <= 5 * KB


def test_keys_that_name_each_others_folders_clash(cache: NodeCache) -> None:
    fill(cache, "a")
    with pytest.raises(ValueError, match="clashes"):
        fill(cache, "a/b")
    assert cache.lookup("a")


def test_pickles_small_and_keeps_no_file_open(cache: NodeCache) -> None:
    before = set(os.listdir("/proc/self/fd"))
    fill(cache, "k")
    cache.lookup("k")
    cache.info()
    cache.clear()
    assert set(os.listdir("/proc/self/fd")) == before
    copy = pickle.loads(pickle.dumps(cache))
    assert (copy.directory, copy.limit, copy.min_free) == (cache.directory, cache.limit, cache.min_free)
    assert len(pickle.dumps(cache)) < 200 + len(cache.directory)


# -- shared by jobs -------------------------------------------------------------------------------


def _filler(directory: str, prefix: str, barrier: object) -> None:
    def slow_writer(data: bytes) -> Callable[[BinaryIO], None]:
        def download(out: BinaryIO) -> None:
            time.sleep(0.005)  # downloads of both processes overlap
            out.write(data)
        return download

    cache = NodeCache(directory, limit=10 * KB, min_free=0)
    barrier.wait()  # type: ignore[attr-defined]
    for number in range(40):
        key = f"{prefix}/{number}"
        cache.fetch(key, KB, slow_writer(payload(key, KB)))
        with open(os.path.join(directory, "v1", "usage"), "rb") as usage:
            fcntl.flock(usage, fcntl.LOCK_EX)  # no eviction meanwhile: a consistent count
            held = cache.info().num_bytes
        if held > 10 * KB:
            raise SystemExit(f"{held} bytes held, over the limit")


@pytest.mark.slow
def test_two_processes_filling_the_cache_keep_the_bound(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    workers = [context.Process(target=_filler, args=(str(tmp_path / "cache"), prefix, barrier))
               for prefix in ("job1", "job2")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    cache = NodeCache(tmp_path / "cache", limit=10 * KB, min_free=0)
    info = cache.info()
    assert 0 < info.num_bytes <= 10 * KB
    assert temps(tmp_path / "cache") == []
    assert cache.lookup("job1/39") or cache.lookup("job2/39")
