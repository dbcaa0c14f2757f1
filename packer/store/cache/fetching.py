"""Bytes of remote objects through the node cache: whole files, or byte ranges by blocks.

An object named by its content (``content_id``: its digest (SHA-256 or BLAKE3), from the manifest) is cut into
fixed blocks (:data:`BLOCK_SIZE`); a range is served from the blocks it covers. Missing blocks
are fetched through :class:`~packer.store.cache.node.NodeCache` (so each byte is fetched once per
node, however many processes want it), adjacent and nearby ones (gaps up to :data:`GAP_BYTES`
of blocks not cached either) coalesced into one ranged GET, and the GETs
of one call, across any number of objects, issued concurrently from one pool per process.
Blocks keep reads aligned whatever the batch, so a later epoch, another worker or another job
finds the same cache entries; small blocks keep a cache far below the dataset from fetching
much more than the records read. A run of blocks is fetched under its first block's cache lock,
extended over the next blocks while no other process is fetching them: processes whose runs
overlap split them and wait for each other's part instead of fetching it twice.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Final

from packer.per_process import PerProcess
from packer.store.base import Store
from packer.store.cache.node import NodeCache

__all__ = ["BLOCK_SIZE", "GAP_BYTES", "CachedObject", "copy_object", "fetch_blocks", "read_ranges_of"]

#: Bytes per cached block of a ranged read (a few records of a photo dataset).
BLOCK_SIZE: Final = 256 << 10
#: Missing blocks at most this many bytes apart are fetched in one GET, the gap with them: an
#: object store's round trip (10-50 ms) costs more than a MiB of transfer, and a shuffle by
#: windows of shards (ShardWindowSampler) reads the gap's records soon anyway. In bytes, not
#: blocks (a tight cache's blocks are as small as 16 KiB), and at most a 64th of the cache's
#: bound: gap bytes a uniform shuffle never reads would otherwise crowd out the records in
#: flight (measured with a cache a tenth of the dataset and a 1 MiB gap: 13x its bytes fetched).
GAP_BYTES: Final = 1 << 20
#: A block: its bytes, just fetched, or the cache file holding them.
Block = str | memoryview
#: Bytes per GET when a whole file is staged (several in flight, written in order).
_PART: Final = 16 << 20
_POOL_THREADS: Final = 32


def _new_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(_POOL_THREADS, thread_name_prefix="packer-fetch")


#: This process's fetch pool (a forked child makes its own: threads do not survive fork).
_pool: PerProcess[ThreadPoolExecutor] = PerProcess(_new_pool)


def _executor() -> ThreadPoolExecutor:
    """This process's fetch pool."""
    return _pool.get()


@dataclass(frozen=True)
class CachedObject:
    """One immutable remote object (``key`` in ``store``, ``size`` bytes, named by content)."""

    store: Store
    key: str
    size: int
    content_id: str
    cache: NodeCache
    block_size: int = BLOCK_SIZE

    @property
    def url(self) -> str:
        """The object's URL, for messages."""
        return self.store.describe(self.key)

    @property
    def gap_blocks(self) -> int:
        """The most missing blocks between two wanted ones fetched with them (:data:`GAP_BYTES`,
        at most a 64th of the cache's bound)."""
        gap = GAP_BYTES if self.cache.limit is None else min(GAP_BYTES, self.cache.limit // 64)
        return max(0, gap // self.block_size - 1)

    def _block_key(self, block: int) -> str:
        return f"{self.content_id[:32]}/b{self.block_size >> 10}k-{block:07d}"

    def _block_span(self, block: int) -> tuple[int, int]:
        start = block * self.block_size
        return start, min(start + self.block_size, self.size)

    def local_copy(self, check: Callable[[str], None] | None = None) -> str:
        """A complete local copy in the cache (downloaded once per node); ``check`` may raise
        on the downloaded file (then nothing is kept)."""
        suffix = os.path.splitext(self.key)[1]
        return self.cache.fetch(f"files/{self.content_id[:32]}{suffix}", self.size, self._download,
                                check=check)

    def _download(self, handle: IO[bytes]) -> None:
        copy_object(self.store, self.key, self.size, handle)

    def cached_blocks(self, blocks: Sequence[int]) -> dict[int, Block]:
        """The blocks already in the cache, with their files."""
        found: dict[int, Block] = {}
        for block in blocks:
            path = self.cache.lookup(self._block_key(block))
            if path is not None:
                found[block] = path
        return found

    def _fetch_run(self, first: int, last: int) -> dict[int, Block]:
        """Fetch blocks ``first..last``, as many as no other process is fetching in one GET, and
        store each as its own cache entry (:meth:`NodeCache.fetch_run`); the rest after it, in
        runs, once their fetchers finish (then found cached).

        Returns each block's bytes as fetched (a read never depends on the cache keeping them:
        under a bound smaller than a batch's blocks they may be evicted at once), or the cache
        file of a block another process fetched.
        """
        spans = [self._block_span(block) for block in range(first, last + 1)]

        def download(count: int) -> list[memoryview]:
            start, stop = spans[0][0], spans[count - 1][1]
            data = memoryview(self.store.read_range(self.key, start, stop))
            return [data[lo - start:hi - start] for lo, hi in spans[:count]]

        got = self.cache.fetch_run([self._block_key(b) for b in range(first, last + 1)],
                                   [hi - lo for lo, hi in spans], download)
        blocks: dict[int, Block] = {first + i: piece for i, piece in enumerate(got)}
        rest = range(first + len(got), last + 1)
        blocks.update(self.cached_blocks(rest))
        for start_block, last_block in _runs([b for b in rest if b not in blocks]):
            blocks.update(self._fetch_run(start_block, last_block))
        return blocks

    def blocks_of(self, ranges: Sequence[tuple[int, int]]) -> list[int]:
        """The blocks the byte ranges cover, sorted."""
        wanted: set[int] = set()
        for start, stop in ranges:
            if stop > start:
                wanted.update(range(start // self.block_size, (stop - 1) // self.block_size + 1))
        return sorted(wanted)

    def read_range(self, start: int, stop: int, files: dict[int, Block]) -> bytes:
        """Bytes ``start:stop`` assembled from blocks (``files``, from :func:`fetch_blocks`)."""
        out = bytearray()
        for block in self.blocks_of([(start, stop)]):
            lo, hi = self._block_span(block)
            out += self._piece(block, files, max(start, lo), min(stop, hi))
        return bytes(out)

    def _piece(self, block: int, files: dict[int, Block], start: int, stop: int) -> bytes:
        """Bytes ``start:stop`` (within one block), from the bytes just fetched or its cache
        file. A block evicted between lookup and open is fetched again, with the other evicted
        blocks of ``files`` (a cache far below the reads in flight evicts several at once); one
        the cache cannot keep long enough to be opened is read straight from the store."""
        lo = self._block_span(block)[0]
        for _ in range(2):
            path = files.get(block)
            if isinstance(path, memoryview):
                return bytes(path[start - lo:stop - lo])
            if path is not None:
                try:
                    with open(path, "rb") as handle:
                        return os.pread(handle.fileno(), stop - start, start - lo)
                except FileNotFoundError:
                    pass
            self._refetch_evicted(files, block)
        return self.store.read_range(self.key, start, stop)

    def _refetch_evicted(self, files: dict[int, Block], block: int) -> None:
        """Fetch ``block`` and every other block of ``files`` whose cache file is gone, in runs."""
        gone = sorted({block} | {b for b, path in files.items()
                                 if isinstance(path, str) and not os.path.exists(path)})
        for first, last in _runs(gone):
            files.update(self._fetch_run(first, last))

    def forget(self, start: int, stop: int) -> None:
        """Drop the cached blocks of a range (their bytes proved wrong)."""
        for block in self.blocks_of([(start, stop)]):
            path = self.cache.lookup(self._block_key(block))
            try:
                if path is not None:
                    os.unlink(path)
            except FileNotFoundError:
                pass


def copy_object(store: Store, key: str, size: int, handle: IO[bytes]) -> None:
    """Write the ``size`` bytes of ``key`` to ``handle`` in order, fetched in 16 MiB parts,
    a few at once (bounded memory, several GETs in flight)."""
    pool = _executor()
    window = 4
    pending: list[Future[bytes]] = []
    for start in range(0, size, _PART):
        pending.append(pool.submit(store.read_range, key, start, min(start + _PART, size)))
        if len(pending) >= window:
            handle.write(pending.pop(0).result())
    for future in pending:
        handle.write(future.result())


def _runs(blocks: Sequence[int], cached: Callable[[int], bool] = lambda block: False,
          gap: int = 0) -> list[tuple[int, int]]:
    """The missing ``blocks`` (sorted) as runs of one GET each: adjacent ones, and nearby ones
    whose gap is at most ``gap`` blocks that are not ``cached`` either (fetched with them)."""
    runs: list[tuple[int, int]] = []
    for block in blocks:
        last = runs[-1][1] if runs else None
        if last is not None and (block == last + 1 or (
                block - last - 1 <= gap and not any(cached(b) for b in range(last + 1, block)))):
            runs[-1] = (runs[-1][0], block)
        else:
            runs.append((block, block))
    return runs


def fetch_blocks(requests: Sequence[tuple[CachedObject, Sequence[tuple[int, int]]]]
                 ) -> list[dict[int, Block]]:
    """Make sure every block the ranges cover is cached, fetching the missing ones of all
    objects concurrently (adjacent blocks of an object in one GET); return each object's block
    files."""
    pool = _executor()
    out: list[dict[int, Block]] = []
    futures: list[tuple[int, Future[dict[int, Block]]]] = []
    for number, (obj, ranges) in enumerate(requests):
        blocks = obj.blocks_of(ranges)
        found = obj.cached_blocks(blocks)
        out.append(found)
        missing = [b for b in blocks if b not in found]
        runs = _runs(missing, lambda block: obj.cache.lookup(obj._block_key(block)) is not None,
                     obj.gap_blocks)
        futures.extend((number, pool.submit(obj._fetch_run, first, last)) for first, last in runs)
    for number, future in futures:
        out[number].update(future.result())
    return out


def read_ranges_of(obj: CachedObject, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
    """The bytes of each range of one object, through the cache."""
    files = fetch_blocks([(obj, ranges)])[0]
    return [obj.read_range(start, stop, files) for start, stop in ranges]
