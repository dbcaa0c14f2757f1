"""An archive's bytes by offset, wherever the archive lies: a local (or mounted) file, or an object
behind a URL read by byte ranges, never downloaded whole.

:func:`open_archive_file` gives an :class:`ArchiveFile`: its size and modification time (-1 for
an object: a store reports sizes only, so a change is seen by size), ``pread`` at any offset, and
a seekable stream for ``tarfile``, ``zipfile`` and gzip to parse. A local file is ``os.pread`` on
one descriptor, exactly as before. An object is read by ranged GETs that read ahead as the
kernel does for a file: :data:`READ_AHEAD` after a jump, doubled while reads go on forward (the
members of one shard lie side by side in the archive; a tar walk's headers follow each other),
up to :data:`BLOCK`, and then :data:`PREFETCH` blocks further on their way in the background
(a tar walk costs its transfer, not a round trip a block); a read of more than a block is one
GET of its own. What was fetched is kept
(:data:`KEPT_BYTES` an object, one open object per URL and process, shared by the shard tasks a
worker runs). Credentials come from the store's usual environment (``AWS_*`` for S3).
"""

from __future__ import annotations

import io
import os
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any, Final

from packer.per_process import PerProcess
from packer.store import Store, open_store
from packer.store.urls import is_url

__all__ = ["BLOCK", "KEPT_BYTES", "PREFETCH", "READ_AHEAD", "ArchiveFile", "ByteSlice", "absolute_location",
           "archive_exists", "forget_remote_files", "open_archive_file"]

#: The most one GET of an object reads ahead; a read of more is a GET of its own.
BLOCK: Final = 1 << 20
#: The first read ahead after a jump; doubled while reads go on forward, up to :data:`BLOCK`.
READ_AHEAD: Final = 64 << 10
#: What a process keeps of one object's fetched bytes (least recently used first out).
KEPT_BYTES: Final = 16 << 20
#: Blocks on their way in the background while reads go forward a block at a time.
PREFETCH: Final = 2
_OBJECTS: Final = 8  # objects a process keeps open


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

    @abstractmethod
    def stream(self) -> IO[bytes]:
        """A seekable, read-only file object over the archive, at its start."""

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
    """An object read by ranges through its store; see the module docstring. One per object
    and process, shared by every reader there (:func:`open_archive_file`), so that the shard
    tasks a worker runs one after another reuse what it fetched."""

    def __init__(self, url: str) -> None:
        self._store, self._key = _split(url)
        super().__init__(url, self._store.stat(self._key), -1)
        self._segments: OrderedDict[int, bytes] = OrderedDict()  # start -> bytes, least recent first
        self._held = 0
        self._ahead, self._last = READ_AHEAD, (-1, -1)  # the last GET's range
        self._coming: dict[int, Future[bytes]] = {}  # start -> the background GET of a block there
        self._horizon = 0  # where the next background GET starts
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def pread(self, count: int, offset: int, *, stream: bool = False) -> bytes:
        """Up to ``count`` bytes at ``offset``; ``stream``: a sequential reader's (a walk over
        the archive's headers), for which, once it reads a block at a time, the next blocks
        are fetched in the background. A member's read never fetches past the read-ahead
        window: a shard's last member does not pull the next shard's bytes."""
        stop = min(offset + max(count, 0), self.size)
        if stop <= offset:
            return b""
        if stop - offset > BLOCK:  # a large member: one GET of its own, not kept
            return self._store.read_range(self._key, offset, stop)
        with self._lock:
            head_start, head = offset, b""  # the newest kept segment holding ``offset``
            for start, data in reversed(self._segments.items()):
                if start <= offset and stop <= start + len(data):  # one holds the whole read
                    self._segments.move_to_end(start)
                    return data[offset - start:stop - start]
                if not head and start <= offset < start + len(data):
                    head_start, head = start, data
            # Reading on (the next member, the next header within a block, a read overlapping
            # the end of the last one): read further ahead.
            forward = self._last[0] <= offset < self._last[1] + BLOCK
            self._ahead = min(2 * self._ahead, BLOCK) if forward else READ_AHEAD
            if not forward:
                self._coming, self._horizon = {}, 0  # a jump: what was coming is not wanted
            streaming = stream and self._ahead == BLOCK
        if streaming:  # whole aligned blocks, the next ones fetched meanwhile
            first, last = offset // BLOCK * BLOCK, (stop - 1) // BLOCK * BLOCK
            data = b"".join(self._block(start) for start in range(first, last + 1, BLOCK))
            return data[offset - first:stop - first]
        begin = head_start + len(head)  # a read overlapping a kept segment's end fetches the rest
        until = min(self.size, max(stop, begin + self._ahead))
        data = self._store.read_range(self._key, begin, until)
        with self._lock:
            self._keep(begin, data)
        return (head[offset - head_start:] + data)[:stop - offset]

    def _block(self, start: int) -> bytes:
        """The aligned block at ``start``: kept, on its way, or fetched now; then the next
        :data:`PREFETCH` blocks are set on their way."""
        size = min(BLOCK, self.size - start)
        with self._lock:
            data = self._segments.get(start)
            coming = self._coming.pop(start, None) if data is None or len(data) != size else None
        if data is None or len(data) != size:
            data = coming.result() if coming is not None else self._store.read_range(self._key, start,
                                                                                      start + size)
        with self._lock:
            self._keep(start, data)
            self._fetch_ahead(start + size)
        return data

    def _keep(self, start: int, data: bytes) -> None:
        self._last = (start, start + len(data))
        old = self._segments.pop(start, None)
        self._held += len(data) - (len(old) if old is not None else 0)
        self._segments[start] = data
        while self._held > KEPT_BYTES and len(self._segments) > 1:
            self._held -= len(self._segments.popitem(last=False)[1])

    def _fetch_ahead(self, position: int) -> None:
        """Keep :data:`PREFETCH` aligned blocks after ``position`` on their way (under the lock)."""
        self._horizon = max(self._horizon, position)
        while len(self._coming) < PREFETCH and self._horizon < self.size:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(PREFETCH, thread_name_prefix="packer-read-ahead")
            start = self._horizon
            if start not in self._segments:
                stop = min(start + BLOCK, self.size)
                self._coming[start] = self._pool.submit(self._store.read_range, self._key, start, stop)
            self._horizon = start + BLOCK

    def stream(self) -> IO[bytes]:
        """The archive read on as a walk reads it (:meth:`pread` with ``stream``), buffered."""
        raw = ByteSlice(lambda position, count: self.pread(count, position, stream=True), 0, self.size)
        return io.BufferedReader(raw, buffer_size=64 << 10)  # type: ignore[return-value]

    def close(self) -> None:
        """Nothing: the file stays open for the process's other readers (:func:`open_archive_file`)."""


class ByteSlice(io.RawIOBase):
    """``size`` bytes from ``start`` as a seekable, read-only file object, read exactly as asked
    by ``read_at(position, count)`` (a tar header is one 512-byte read, never a buffer's worth);
    at its end a read gives what there is rather than failing (so a cut class tar still yields
    the members before the cut)."""

    def __init__(self, read_at: Callable[[int, int], bytes], start: int, size: int) -> None:
        super().__init__()
        self.read_at, self.start, self.size, self.position = read_at, start, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        wanted = max(0, min(len(buffer), self.size - self.position))
        data = self.read_at(self.start + self.position, wanted)
        buffer[:len(data)] = data
        self.position += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.position, os.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def tell(self) -> int:
        return self.position


def open_archive_file(location: str) -> ArchiveFile:
    """The archive at ``location``, a path or a URL (``s3://bucket/train.tar``), open.

    Raises:
        OSError: a local file cannot be opened.
        StoreError: an object cannot be reached (``ObjectNotFoundError`` when it is not there).
    """
    if not is_url(location):
        return LocalArchiveFile(location)
    opened = _REMOTE.get()
    with opened.lock:
        found = opened.files.pop(location, None)
    if found is None:
        found = RemoteArchiveFile(location)
    with opened.lock:
        opened.files[location] = found  # most recent last
        while len(opened.files) > _OBJECTS:
            opened.files.popitem(last=False)
    return found


def forget_remote_files() -> None:
    """Drop this process's open objects and what they fetched (a source's ``close``): a later
    conversion in the process fetches afresh, even of an object replaced by one of its size."""
    opened = _REMOTE.current()
    if opened is not None:
        with opened.lock:
            opened.files.clear()


class _Opened:
    """This process's open objects, by URL, least recently opened first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.files: OrderedDict[str, RemoteArchiveFile] = OrderedDict()


_REMOTE: Final = PerProcess(_Opened)
