"""What every storage backend provides: a writer and a reader for one shard file.

A backend knows bytes on disk and nothing else: a shard stores the payloads of a contiguous
range of samples, addressed by their local index ``0 .. n-1``. Labels, paths and classes live
in the manifest and the sample index, never in a shard.

Readers hold a path until first use and open the file in the process that reads. Every open
reader is closed before this process forks (``os.register_at_fork``) and is reopened lazily,
keyed by pid, afterwards; pickling drops the handle. So a reader the main process has used is
safe in DataLoader workers under ``fork``, ``spawn`` and ``forkserver``, and py-lmdb 2.x's
refusal to open one path twice in a process never triggers.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Arena", "Backend", "ShardReader", "ShardWriter"]


class ShardWriter(ABC):
    """Writes exactly one shard file, in one process; payloads arrive in local-index order.

    ``capacity`` is an upper bound on the payload bytes the caller will write (the planned
    bytes of the shard); backends size their files from it. Use as a context manager: a clean
    exit calls :meth:`close`, an exception calls :meth:`abort`, which deletes the file.
    """

    def __init__(self, path: str, *, capacity: int) -> None:
        self.path = path
        self.capacity = capacity
        self.count = 0

    @abstractmethod
    def write(self, payload: bytes) -> None:
        """Append one payload; its local index is the number written before it.

        Raises:
            ShardWriteError: the store refused or failed the write (an ``OSError`` with the
                cause's errno where known; the cause is chained).
        """

    def sync(self) -> None:  # noqa: B027 - optional hook, a no-op unless a backend needs it
        """Push what was written so far towards stable storage now, so that :meth:`close`
        has less left to wait for. Optional: backends that build the file at close skip it."""

    def finish(self) -> None:  # noqa: B027 - optional hook, a no-op unless a backend needs it
        """Put every byte of the shard into the file, so that it reads as its final content,
        though not yet durably: a caller may hash it while :meth:`close` syncs it. Nothing may
        be written after. A backend that buffers writes, or writes a footer or index last, must
        do that here, not in :meth:`close` (the contract suite checks it); only one whose
        every write already reached the file when :meth:`ShardWriter.write` returned may skip it."""

    @abstractmethod
    def close(self) -> None:
        """Finish the file (see :meth:`finish`), flush it to stable storage and close it;
        closing again does nothing."""

    @abstractmethod
    def abort(self) -> None:
        """Close without finishing and delete whatever was written."""

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


_OPEN_READERS: weakref.WeakSet[ShardReader] = weakref.WeakSet()
_OPEN_READERS_LOCK = threading.RLock()


#: Serialises opening: threads racing to a reader's first read must open its file once (two
#: opens leaked a handle each time), and a fork waits for an open in progress to finish.
_OPEN_LOCK = threading.Lock()


def _close_open_readers() -> None:
    with _OPEN_READERS_LOCK:
        readers = list(_OPEN_READERS)
    for reader in readers:
        reader.close()


def _close_readers_before_fork() -> None:
    _OPEN_LOCK.acquire()  # released in both processes right after the fork
    _close_open_readers()


def _release_open_lock_after_fork() -> None:
    _OPEN_LOCK.release()


# At exit, before the interpreter tears modules down: a reader still held by a module-level
# dataset then closes while os, h5py and the LMDB registry exist (after, __del__ would find None).
atexit.register(_close_open_readers)
os.register_at_fork(before=_close_readers_before_fork,
                    after_in_parent=_release_open_lock_after_fork,
                    after_in_child=_release_open_lock_after_fork)


class Arena:
    """Reusable memory that batch reads copy payloads into, so that a batch of large records
    (``pixels``: about 260 KB each) lands in pages already mapped instead of fresh ones.

    :meth:`take` hands out consecutive views; :meth:`reset` starts over, so every view taken
    before is overwritten by the next batch. One arena per thread (see :class:`ShardSet`).
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._used = 0

    def reset(self) -> None:
        """Reuse the memory from the start: views handed out before are no longer valid."""
        self._used = 0

    def take(self, size: int) -> memoryview:
        """A writable view of ``size`` bytes, valid until :meth:`reset`."""
        if self._used + size > len(self._buffer):
            # A new, larger buffer; views into the old one keep it alive until they go.
            self._buffer = bytearray(max(size, 2 * len(self._buffer), 1 << 20))
            self._used = 0
        view = memoryview(self._buffer)[self._used:self._used + size]
        self._used += size
        return view


class ShardReader(ABC):
    """Random access to one finished shard; opens lazily in whichever process reads."""

    def __init__(self, path: str, num_samples: int) -> None:
        self.path = path
        self.num_samples = num_samples
        self._pid: int | None = None

    def __len__(self) -> int:
        return self.num_samples

    def _ensure_open(self) -> None:
        pid = os.getpid()
        if self._pid == pid:
            return
        with _OPEN_LOCK:
            if self._pid == pid:  # another thread opened it while this one waited
                return
            if self._pid is not None:
                self._close()  # inherited from the parent: closing it in the child is safe
            self._open()
            self._pid = pid
            with _OPEN_READERS_LOCK:
                _OPEN_READERS.add(self)

    def _check_index(self, index: int) -> None:
        if not 0 <= index < self.num_samples:
            raise IndexError(f"local index {index} out of range for {self.num_samples} samples "
                             f"in {self.path!r}")

    def read(self, index: int) -> bytes:
        """Return the payload at local ``index``.

        Raises:
            IndexError: ``index`` is outside ``range(len(self))``.
            ShardError: the file is missing, damaged or unreadable.
        """
        self._check_index(index)
        self._ensure_open()
        return self._read_many([index])[0]

    def read_many(self, indices: Sequence[int]) -> list[bytes]:
        """Return the payloads at several local indices, in one transaction where possible."""
        for index in indices:
            self._check_index(index)
        self._ensure_open()
        return self._read_many(indices)

    def read_into(self, indices: Sequence[int], arena: Arena) -> list[memoryview]:
        """Like :meth:`read_many`, but the payloads are copied into ``arena``: views valid
        until its next :meth:`Arena.reset`. For batch readers that use the bytes at once."""
        for index in indices:
            self._check_index(index)
        self._ensure_open()
        return self._read_into(indices, arena)

    def stored_count(self) -> int | None:
        """How many records the file itself holds, or ``None`` where the backend cannot tell.

        For verification: it is compared with ``num_samples``, which comes from the manifest.

        Raises:
            ShardError: the file is missing, damaged or unreadable.
        """
        return None

    def close(self) -> None:
        """Release the handle, if any; the reader stays usable and reopens on the next read."""
        if self._pid is not None:
            self._close()
        self._pid = None
        with _OPEN_READERS_LOCK:
            _OPEN_READERS.discard(self)

    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        # A reader dropped without close() must not pin its file handle for the process's life.
        # At interpreter exit the atexit hook has closed every open reader; what is collected
        # later (module globals already None) is left to the OS.
        if getattr(self, "_pid", None) is not None and not _finalizing():
            self._close()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "num_samples": self.num_samples}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["num_samples"])  # type: ignore[misc]

    @abstractmethod
    def _open(self) -> None:
        """Open the file in this process."""

    @abstractmethod
    def _read_many(self, indices: Sequence[int]) -> list[bytes]:
        """Read payloads from the open file; indices are already checked."""

    def _read_into(self, indices: Sequence[int], arena: Arena) -> list[memoryview]:
        """Read payloads into ``arena``; backends that can ``pread`` straight into it do."""
        views = []
        for payload in self._read_many(indices):
            view = arena.take(len(payload))
            view[:] = payload
            views.append(view)
        return views

    @abstractmethod
    def _close(self) -> None:
        """Close the handle this process opened."""


@dataclass(frozen=True)
class Backend:
    """Everything packer needs to know about one storage backend."""

    name: str
    suffix: str
    writer: type[ShardWriter]
    reader: type[ShardReader]
    description: str
    #: The file size of one shard holding payloads of the given sizes (``--dry-run``'s
    #: estimate); None when the backend cannot tell.
    estimate: Callable[[Sequence[int]], int] | None = None
    #: Where each record of a finished shard file lies in it: ``int64[n, 2]`` of (offset,
    #: length), so a remote reader fetches a record as one byte range without the backend's
    #: library (:mod:`packer.format.records`); None when the backend cannot tell.
    ranges: Callable[[str, int], np.ndarray] | None = None

    def estimate_shard_bytes(self, sizes: Sequence[int]) -> int | None:
        """Estimated file size of one shard of payloads of ``sizes`` bytes, or None if unknown."""
        return None if self.estimate is None else self.estimate(sizes)
