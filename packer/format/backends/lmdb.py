"""LMDB shards: one LMDB environment per shard, stored as a single file.

On-disk layout of ``shard-<sha256 prefix>.lmdb`` (one shard; unchanged since format version 1):

* an LMDB environment opened with ``subdir=False``: the path is the data file itself, and no
  ``-lock`` file is ever written (writers and readers both use ``lock=False``);
* the default (unnamed) database only; key = the sample's local index in the shard as an
  8-byte big-endian unsigned integer, so key order is index order and writes use
  ``append=True``; value = the stored payload (for the ``original`` codec, the source file's
  bytes);
* nothing else in band: counts, labels and paths live in the manifest and the sample index.

Writing batches many records per transaction (one commit per record is 20-80x slower), checks
the result of every ``put(append=True)`` (a refused put is otherwise silent), sizes the map from
the planned bytes and doubles it on ``MapFullError``. Commits are not synced one by one: the
file is synced once when the shard is closed (a half-written shard lives in the staging area
and is never used, so per-commit durability would only cost time). Readers open ``readonly=True, lock=False``
so read-only and shared storage work and nothing is ever written next to the data.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence

import lmdb

from packer.errors import ShardWriteError
from packer.format.backends.base import Backend, ShardWriter
from packer.format.backends.lmdb_reader import LMDBShardReader, record_ranges, shard_key

__all__ = ["BACKEND", "LMDBShardReader", "LMDBShardWriter", "estimate_shard_bytes"]

_BATCH_BYTES = 64 << 20
_BATCH_RECORDS = 1000


def _write_error(what: str, path: str, err: lmdb.Error) -> ShardWriteError:
    """``what`` failed: a :class:`ShardWriteError` with the errno LMDB's error stands for.

    py-lmdb raises a class per error (``DiskError`` is ENOSPC, ``ReadonlyError`` EACCES); its
    C extension gives no code otherwise, its cffi version the code as a second argument.
    """
    code = (errno.ENOSPC if isinstance(err, lmdb.DiskError) else
            errno.EACCES if isinstance(err, lmdb.ReadonlyError) else
            err.args[1] if len(err.args) > 1 and isinstance(err.args[1], int) and err.args[1] > 0 else None)
    return ShardWriteError(f"{what}: {err}", errno=code, path=path)


class LMDBShardWriter(ShardWriter):
    """Write one LMDB shard file, committing in batches of up to 64 MiB."""

    def __init__(self, path: str, *, capacity: int) -> None:
        super().__init__(path, capacity=capacity)
        self._batch: list[bytes] = []
        self._batch_bytes = 0
        # Each value takes whole overflow pages; leave room for the B-tree and free pages.
        self._map_size = capacity + capacity // 8 + (16 << 20)
        try:
            self._env: lmdb.Environment | None = lmdb.open(
                path, subdir=False, map_size=self._map_size, lock=False, sync=False,
                metasync=False, meminit=True, readahead=False, max_dbs=0)
        except lmdb.Error as err:
            raise _write_error(f"Cannot create LMDB shard {path!r}", path, err) from err

    def write(self, payload: bytes) -> None:
        """Queue one payload; a full batch is committed in one transaction."""
        self._batch.append(payload)
        self._batch_bytes += len(payload)
        if self._batch_bytes >= _BATCH_BYTES or len(self._batch) >= _BATCH_RECORDS:
            self._commit()

    def _commit(self) -> None:
        if not self._batch or self._env is None:
            return
        first = self.count
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    for offset, payload in enumerate(self._batch):
                        if not txn.put(shard_key(first + offset), payload, append=True):
                            raise ShardWriteError(f"LMDB refused record {first + offset} in "
                                                  f"{self.path!r} (keys out of order); the shard is "
                                                  "not usable.", path=self.path)
                break
            except lmdb.MapFullError:
                self._map_size *= 2
                self._env.set_mapsize(self._map_size)
            except lmdb.Error as err:
                raise _write_error(f"Writing LMDB shard {self.path!r} failed", self.path, err) from err
        self.count += len(self._batch)
        self._batch = []
        self._batch_bytes = 0

    def sync(self) -> None:
        """fsync what is committed so far. Commits themselves stay at their batch boundaries:
        moving them would change the file's bytes, and the output must not depend on when
        this is called (the assembler calls it between segments)."""
        if self._env is None:
            return
        try:
            self._env.sync(True)
        except lmdb.Error as err:
            raise _write_error(f"Writing LMDB shard {self.path!r} failed", self.path, err) from err

    def finish(self) -> None:
        """Commit what is queued: the file then holds its final bytes (not yet synced). On a
        failure the environment is closed (the file stays, for :meth:`abort` or a cleanup)."""
        try:
            self._commit()
        except BaseException:
            if self._env is not None:
                self._env.close()
                self._env = None
            raise

    def close(self) -> None:
        """Commit what is queued, sync and close."""
        if self._env is None:
            return
        try:
            self._commit()
            self._env.sync(True)
        except lmdb.Error as err:
            raise _write_error(f"Writing LMDB shard {self.path!r} failed", self.path, err) from err
        finally:
            self._env.close()
            self._env = None

    def abort(self) -> None:
        """Close and delete the partial file."""
        if self._env is not None:
            self._env.close()
            self._env = None
        for leftover in (self.path, self.path + "-lock"):
            if os.path.exists(leftover):
                os.unlink(leftover)


# How py-lmdb's bundled liblmdb lays out one append-only shard, for size estimates: 4 KiB
# pages, 2 meta pages; a leaf node is an 8-byte header + 8-byte key + the value (even-aligned,
# plus a 2-byte slot); a node over _NODE_MAX moves its value to whole overflow pages and keeps
# an 8-byte page number. Each commit after the first copies a root-to-leaf path.
_PAGE = 4096
_PAGE_HEADER = 16
_NODE = 8 + 8
_NODE_MAX = (((_PAGE - _PAGE_HEADER) // 2) & -2) - 2
_BRANCH_FANOUT = (_PAGE - _PAGE_HEADER) // (_NODE + 2)


def estimate_shard_bytes(sizes: Sequence[int]) -> int:
    """Estimated file size of one LMDB shard holding values of ``sizes`` bytes."""
    pages, leaves, used = 2, 0, _PAGE
    for size in sizes:
        node = _NODE + size
        if node > _NODE_MAX:
            pages += (_PAGE_HEADER - 1 + size) // _PAGE + 1
            node = _NODE + 8
        node += (node & 1) + 2
        if used + node > _PAGE - _PAGE_HEADER:
            leaves, used = leaves + 1, 0
        used += node
    depth, level = 1, leaves
    while level > 1:
        level = -(-level // _BRANCH_FANOUT)
        pages, depth = pages + level, depth + 1
    extra_commits = max(0, -(-len(sizes) // _BATCH_RECORDS) - 1)
    return (pages + leaves + extra_commits * (depth + 1)) * _PAGE


BACKEND = Backend(
    name="lmdb",
    suffix=".lmdb",
    writer=LMDBShardWriter,
    reader=LMDBShardReader,
    description="one LMDB environment file per shard, key = 8-byte big-endian local index",
    estimate=estimate_shard_bytes,
    ranges=record_ranges,
)
