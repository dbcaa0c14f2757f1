"""How a dataset's files reach its readers: straight from a local path, or through the node
cache from a URL, as whole staged shards or as byte ranges of records.

* ``local``: the store has real paths (a local disk, NFS, Lustre): today's readers, untouched.
* ``whole``: each shard is downloaded once into the cache (checked against its digest) and read
  there by its backend, like a local file; for a cache that holds the dataset.
* ``ranged``: records are fetched as byte ranges of their shard (the ``records`` array of
  :mod:`packer.format.records` says where), through the cache's blocks, each record checked
  against its digest; for a cache far smaller than the dataset. Backend-independent.

``auto`` picks ``whole`` when the cache's bound (and its disk's free space) holds the dataset
with room to spare, else ``ranged`` (``whole`` for datasets converted before records existed).
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import numpy as np

from packer.digests import SHA256, DigestAlgorithm
from packer.errors import CacheError, IntegrityError, ShardError
from packer.format.backends import Backend, ShardReader
from packer.format.backends.base import Arena
from packer.format.manifest import FileEntry, Manifest, ShardEntry
from packer.format.records import digest64
from packer.per_process import PerProcess
from packer.store import NodeCache, Store
from packer.store.cache.fetching import BLOCK_SIZE, CachedObject, fetch_blocks

__all__ = ["MODES", "DatasetAccess", "choose_access"]

log = logging.getLogger(__name__)

#: The access modes a reader may ask for.
MODES: Final = ("auto", "whole", "ranged")
#: ``auto`` stages whole shards when the cache can hold this much more than the dataset.
_HEADROOM: Final = 1.25


class DatasetAccess(ABC):
    """Local files for the index arrays and one reader per shard, for one store."""

    mode: str = ""

    def __init__(self, store: Store) -> None:
        self.store = store

    @abstractmethod
    def index_file(self, entry: FileEntry) -> str:
        """A local file holding the sample-index file ``entry`` (to memory-map)."""

    @abstractmethod
    def reader(self, backend: Backend, shard: ShardEntry, records: Callable[[], np.ndarray]) -> ShardReader:
        """A reader of ``shard``; ``records()`` gives its rows of the records array."""

    def prefetch(self, readers: Mapping[int, ShardReader], wanted: Mapping[int, Sequence[int]]) -> None:
        """Fetch, concurrently, what reading ``wanted`` local indices of these shards needs."""

    def describe(self) -> str:
        """One line for people: how this dataset is read."""
        return f"{self.mode} from {self.store.describe()}"


class LocalAccess(DatasetAccess):
    """Files on a local or mounted file system, read in place."""

    mode = "local"

    def index_file(self, entry: FileEntry) -> str:
        return self.store.local_path(entry.path) or entry.path

    def reader(self, backend: Backend, shard: ShardEntry, records: Callable[[], np.ndarray]) -> ShardReader:
        return backend.reader(self.store.local_path(shard.path) or shard.path, shard.num_samples)


def block_size_for(cache: NodeCache) -> int:
    """Bytes per cached block: :data:`~packer.store.cache.fetching.BLOCK_SIZE`, smaller under a tight
    bound (a power of two, at most a 1024th of it, at least 16 KiB): a cache far below the
    dataset finds little to reuse within an epoch, so a block should cost little more than the
    record it was fetched for."""
    if cache.limit is None:
        return BLOCK_SIZE
    size = BLOCK_SIZE
    while size > 16 << 10 and size * 1024 > cache.limit:
        size //= 2
    return size


class _CachedAccess(DatasetAccess):
    def __init__(self, store: Store, cache: NodeCache, digest: DigestAlgorithm) -> None:
        super().__init__(store)
        self.cache = cache
        self.block_size = block_size_for(cache)
        self.digest = digest  # what every fetched file and record is checked with

    def _object(self, entry: ShardEntry | FileEntry) -> CachedObject:
        return CachedObject(self.store, entry.path, entry.num_bytes, entry.sha256, self.cache,
                            self.block_size)

    def index_file(self, entry: FileEntry) -> str:
        return stage_checked(self._object(entry), self.digest)

    def describe(self) -> str:
        bound = "no bound" if self.cache.limit is None else f"bound {self.cache.limit} bytes"
        return f"{self.mode} from {self.store.describe()} through {self.cache.directory} ({bound})"


def stage_checked(obj: CachedObject, digest: DigestAlgorithm) -> str:
    """``obj`` downloaded into the cache and checked against its digest (by the dataset's
    algorithm), once more if the first copy is wrong.

    Raises:
        IntegrityError: both copies differ from the manifest's checksum.
    """
    def check(path: str) -> None:
        if digest.file(path) != obj.content_id:
            raise IntegrityError(f"{obj.url} does not match the {digest.name} digest its manifest records")

    try:
        return obj.local_copy(check)
    except IntegrityError:
        log.warning("%s came back damaged; fetching it again", obj.url)
    try:
        return obj.local_copy(check)
    except IntegrityError as err:
        raise IntegrityError(f"{err}, fetched twice: the object was changed or damaged in the store. "
                             "Publish the dataset again (push_dataset()), or check it with "
                             "verify_dataset().") from None


class StagedShardReader(ShardReader):
    """A shard downloaded whole into the cache, then read there by its backend's reader."""

    def __init__(self, obj: CachedObject, backend: Backend, num_samples: int,
                 digest: DigestAlgorithm) -> None:
        super().__init__(obj.url, num_samples)
        self.obj = obj
        self.backend = backend
        self.digest = digest
        self._inner: ShardReader | None = None
        #: The local copy this process opens; dropped when the reader closes (and so before a
        #: fork), so that each opening finds the copy in the cache again.
        self._staged: PerProcess[str] = PerProcess(self._stage)

    def _stage(self) -> str:
        return stage_checked(self.obj, self.digest)

    def stage(self) -> str:
        """The shard's local copy, downloading it if this node has none (outside any lock)."""
        return self._staged.get()

    def staged_here(self) -> bool:
        """Whether this process holds the shard's local copy (staged and not closed since)."""
        return self._staged.current() is not None

    def _ensure_open(self) -> None:
        self.stage()  # before the backend's open lock: a download must not hold it
        super()._ensure_open()

    def _open(self) -> None:
        self._inner = self.backend.reader(self.stage(), self.num_samples)

    def _target(self) -> ShardReader:
        if self._inner is None:
            raise CacheError(f"The staged copy of {self.obj.url} is not open")
        return self._inner

    def _read_many(self, indices: Sequence[int]) -> list[bytes]:
        return self._target().read_many(indices)

    def _read_into(self, indices: Sequence[int], arena: Arena) -> list[memoryview]:
        return self._target().read_into(indices, arena)

    def stored_count(self) -> int | None:
        self._ensure_open()
        return self._target().stored_count()

    def _close(self) -> None:
        if self._inner is not None:
            self._inner.close()
            self._inner = None

    def close(self) -> None:
        super().close()
        self._staged.clear()

    def __getstate__(self) -> dict[str, Any]:
        return {"obj": self.obj, "backend": self.backend, "num_samples": self.num_samples,
                "digest": self.digest}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["obj"], state["backend"], state["num_samples"],  # type: ignore[misc]
                      state["digest"])


class WholeAccess(_CachedAccess):
    """Whole shards staged into the cache."""

    mode = "whole"

    def reader(self, backend: Backend, shard: ShardEntry, records: Callable[[], np.ndarray]) -> ShardReader:
        return StagedShardReader(self._object(shard), backend, shard.num_samples, self.digest)

    def prefetch(self, readers: Mapping[int, ShardReader], wanted: Mapping[int, Sequence[int]]) -> None:
        todo = [r for n, r in readers.items() if n in wanted and isinstance(r, StagedShardReader)
                and not r.staged_here()]
        if todo:
            with ThreadPoolExecutor(min(8, len(todo))) as pool:
                list(pool.map(lambda r: r.stage(), todo))


class RangedShardReader(ShardReader):
    """Records fetched as byte ranges of their shard, checked against their digests."""

    def __init__(self, obj: CachedObject, num_samples: int, records: Callable[[], np.ndarray],
                 num_bytes: int, digest: DigestAlgorithm = SHA256) -> None:
        super().__init__(obj.url, num_samples)
        self.obj = obj
        self.digest = digest
        self._records = records
        self.num_bytes = num_bytes  # the shard's size, as the manifest records it

    def ranges(self, indices: Sequence[int]) -> list[tuple[int, int]]:
        """The byte ranges of these local indices in the shard file.

        Raises:
            ShardError: a record claims bytes outside the shard (a damaged or crafted sample
                index): refused before anything is fetched or allocated for it.
        """
        rows = self._records()
        found = []
        for index in indices:
            start, stop = int(rows[index, 0]), int(rows[index, 0] + rows[index, 1])
            found.append((start, stop))
            if not 0 <= start <= stop <= self.num_bytes:
                raise ShardError(
                    f"Record {index} of {self.obj.url} claims bytes {start}-{stop}, but the shard "
                    f"holds {self.num_bytes} bytes: the dataset's sample index is damaged or was "
                    "crafted. Check it with verify_dataset(), then convert or publish it again.")
        return found

    def _open(self) -> None:
        """Nothing to open: each read fetches what it needs through the cache."""

    def _close(self) -> None:
        """Nothing is held open."""

    def _read_many(self, indices: Sequence[int]) -> list[bytes]:
        rows = self._records()
        ranges = self.ranges(indices)
        files = fetch_blocks([(self.obj, ranges)])[0]
        out = []
        for index, (start, stop) in zip(indices, ranges, strict=True):
            data = self.obj.read_range(start, stop, files)
            if digest64(data, self.digest) != int(rows[index, 2]):
                data = self._refetch(index, start, stop, int(rows[index, 2]))
            out.append(data)
        return out

    def _refetch(self, index: int, start: int, stop: int, digest: int) -> bytes:
        log.warning("record %d of %s came back damaged; fetching it again", index, self.obj.url)
        self.obj.forget(start, stop)
        data = self.obj.store.read_range(self.obj.key, start, stop)
        if digest64(data, self.digest) != digest:
            raise IntegrityError(
                f"Record {index} of {self.obj.url} (bytes {start}-{stop}) does not match the digest "
                "its dataset records, fetched twice: the shard was changed or damaged in the store. "
                "Check it with verify_dataset(), then publish the dataset again (push_dataset()).")
        return data

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a RangedShardReader pickles with its ShardSet, not on its own")


class RangedAccess(_CachedAccess):
    """Records read as byte ranges through the cache's blocks."""

    mode = "ranged"

    def reader(self, backend: Backend, shard: ShardEntry, records: Callable[[], np.ndarray]) -> ShardReader:
        return RangedShardReader(self._object(shard), shard.num_samples, records, shard.num_bytes,
                                 self.digest)

    def prefetch(self, readers: Mapping[int, ShardReader], wanted: Mapping[int, Sequence[int]]) -> None:
        requests = [(r.obj, r.ranges(wanted[n])) for n, r in readers.items()
                    if n in wanted and isinstance(r, RangedShardReader)]
        if requests:
            fetch_blocks(requests)


def choose_access(store: Store, manifest: Manifest, *, cache: NodeCache | None = None,
                  mode: str = "auto") -> DatasetAccess:
    """The access for ``manifest``'s dataset in ``store``; see the module docstring.

    Raises:
        ValueError: ``mode`` is not one of :data:`MODES`.
        CacheError: ``ranged`` was asked for a dataset without a records array, or whole shards
            cannot fit in the cache's bound.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if store.is_local:
        return LocalAccess(store)
    cache = cache if cache is not None else NodeCache()
    has_records = "records" in manifest.sample_index
    if mode == "ranged" and not has_records:
        raise CacheError(f"{store.describe()} was converted before packer recorded record ranges: "
                         "it can only be read as whole shards (mode='whole'); convert it again "
                         "with this packer to read it by ranges.")
    if mode == "auto":
        mode = "whole" if not has_records or _fits(cache, manifest.num_bytes) else "ranged"
    biggest = max((s.num_bytes for s in manifest.shards), default=0)
    if mode == "whole" and cache.limit is not None and cache.limit < 2 * biggest:
        raise CacheError(f"The cache bound ({cache.limit} bytes) cannot hold two shards of "
                         f"{store.describe()} (the largest has {biggest} bytes), as reading whole "
                         "shards needs; raise cache_limit, or read by ranges (a dataset converted "
                         "by a packer that records record ranges).")
    digest = manifest.digest_algorithm  # a missing blake3 wheel is named before anything is fetched
    access: DatasetAccess = (WholeAccess if mode == "whole" else RangedAccess)(store, cache, digest)
    log.info("reading %s", access.describe())
    return access


def _fits(cache: NodeCache, dataset_bytes: int) -> bool:
    """Whether the cache's bound and its disk's free space hold the dataset with headroom."""
    need = int(dataset_bytes * _HEADROOM)
    if cache.limit is not None and cache.limit < need:
        return False
    try:
        os.makedirs(cache.directory, exist_ok=True)
        stats = os.statvfs(cache.directory)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize - cache.min_free >= need - cache.info().num_bytes
