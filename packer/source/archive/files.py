"""An archive's bytes by offset, wherever the archive lies: a local (or mounted) file, or an object
behind a URL read by byte ranges, never downloaded whole.

:func:`open_archive_file` gives an :class:`ArchiveFile`: its size and modification time (-1 for
an object: a store reports sizes only, so a change is seen by size), ``pread`` at any offset, and
a seekable stream for ``tarfile``, ``zipfile`` and gzip to parse. A local file is ``os.pread`` on
one descriptor, exactly as before. An object is read in aligned blocks of :data:`BLOCK` bytes,
the last :data:`BLOCKS` kept: the headers a tar walk reads and the members of one shard, which
lie side by side in the archive, come from a few ranged GETs, and a read of more than a block is
one GET of its own. Credentials come from the store's usual environment (``AWS_*`` for S3).
"""

from __future__ import annotations

import io
import os
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from typing import IO, Any, Final

from packer.store import Store, open_store
from packer.store.urls import is_url

__all__ = ["BLOCK", "BLOCKS", "ArchiveFile", "absolute_location", "archive_exists", "open_archive_file"]

BLOCK: Final = 1 << 20
BLOCKS: Final = 16


def absolute_location(location: str | os.PathLike[str]) -> str:
    """A path made absolute; a URL as it is."""
    text = os.fspath(location)
    return text if is_url(text) else os.path.abspath(text)


def _split(url: str) -> tuple[Store, str]:
    """The store of the URL's folder and the object's key in it."""
    folder, _, name = url.rstrip("/").rpartition("/")
    return open_store(folder), name


def archive_exists(location: str) -> bool:
    """Whether a file (or an object, for a URL) is there."""
    if not is_url(location):
        return os.path.isfile(location)
    store, key = _split(location)
    return store.sizes([key]).get(key) is not None


class ArchiveFile(ABC):
    """One open archive: ``size``, ``mtime_ns``, :meth:`pread`, :meth:`stream`; close it (or use
    it as a context manager) when done."""

    def __init__(self, location: str, size: int, mtime_ns: int) -> None:
        self.location, self.size, self.mtime_ns = location, size, mtime_ns

    def __enter__(self) -> ArchiveFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def pread(self, count: int, offset: int) -> bytes:
        """Up to ``count`` bytes at ``offset`` (fewer only at the end)."""

    def stream(self) -> IO[bytes]:
        """A seekable, read-only file object over the archive, at its start."""
        return io.BufferedReader(_Stream(self), buffer_size=64 << 10)  # type: ignore[return-value]

    def close(self) -> None:
        """Release what the file holds."""


class LocalArchiveFile(ArchiveFile):
    """A file on this machine: one unbuffered handle (a tar header costs 512 bytes read)."""

    def __init__(self, path: str) -> None:
        self._handle = open(path, "rb", buffering=0)  # noqa: SIM115  # closed by close()
        status = os.fstat(self._handle.fileno())
        super().__init__(path, status.st_size, status.st_mtime_ns)

    def pread(self, count: int, offset: int) -> bytes:
        return os.pread(self._handle.fileno(), count, offset)

    def stream(self) -> IO[bytes]:
        self._handle.seek(0)
        return self._handle

    def close(self) -> None:
        self._handle.close()


class RemoteArchiveFile(ArchiveFile):
    """An object read by ranges through its store; see the module docstring."""

    def __init__(self, url: str) -> None:
        self._store, self._key = _split(url)
        super().__init__(url, self._store.stat(self._key), -1)
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def pread(self, count: int, offset: int) -> bytes:
        stop = min(offset + max(count, 0), self.size)
        if stop <= offset:
            return b""
        if stop - offset > BLOCK:  # a large member: one GET of its own, not cached
            return self._store.read_range(self._key, offset, stop)
        first, last = offset // BLOCK, (stop - 1) // BLOCK
        data = b"".join(self._block(number) for number in range(first, last + 1))
        return data[offset - first * BLOCK:stop - first * BLOCK]

    def _block(self, number: int) -> bytes:
        with self._lock:
            found = self._blocks.get(number)
            if found is not None:
                self._blocks.move_to_end(number)
                return found
        data = self._store.read_range(self._key, number * BLOCK, min((number + 1) * BLOCK, self.size))
        with self._lock:
            self._blocks[number] = data
            while len(self._blocks) > BLOCKS:
                self._blocks.popitem(last=False)
        return data

    def close(self) -> None:
        self._blocks.clear()


class _Stream(io.RawIOBase):
    """``read``/``seek``/``tell`` over an :class:`ArchiveFile`'s ``pread``."""

    def __init__(self, archive: ArchiveFile) -> None:
        self._archive, self._position = archive, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._archive.pread(len(buffer), self._position)
        buffer[:len(data)] = data
        self._position += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._archive.size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def tell(self) -> int:
        return self._position


def open_archive_file(location: str) -> ArchiveFile:
    """The archive at ``location``, a path or a URL (``s3://bucket/train.tar``), open.

    Raises:
        OSError: a local file cannot be opened.
        StoreError: an object cannot be reached (``ObjectNotFoundError`` when it is not there).
    """
    return RemoteArchiveFile(location) if is_url(location) else LocalArchiveFile(location)
