"""Read archive members by byte range, from any number of processes at once.

An :class:`ArchiveReader` holds the archives' paths and what they were when scanned (size,
modification time): it pickles small and opens each archive lazily, once per process (handles
are keyed by ``os.getpid()``, so a forked child never uses its parent's). A tar member is one
``os.pread`` at its data offset. A zip member is one ``pread`` of its local header and data
(a second only when the header is unusually long); stored data is used as is, deflated (or
bzip2) data is decompressed, and the CRC-32 the zip recorded is checked. A ``.tar.gz`` is read
from its decompressed spool (:mod:`packer.source.spool`), made once per node.

Locators are described in :mod:`packer.source.members`. Items the scan already found damaged
(or a list names but the archive lacks, or a WebDataset sample without image or label) carry
a status and are refused with its reason before anything is read.
"""

from __future__ import annotations

import bz2
import os
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from packer.errors import SourceError
from packer.source.base import ItemReader, SourceItem
from packer.source.imagecheck import image_dimensions
from packer.source.members import OK, STATUS_REASONS
from packer.source.sourcefile import UnpackableFile
from packer.source.spool import ensure_spool
from packer.source.zipindex import LOCAL_HEADER, local_data_start

__all__ = ["ArchivePart", "ArchiveReader"]

_SLACK: Final = 1024  # bytes read past a zip local header's fixed part for its name and extra
_HEADER_BYTES: Final = 1 << 16  # enough of an image to find its size in (else it is read whole)
_OPEN_LIMIT: Final = 16  # archives kept open per process (a WebDataset has thousands of shards)
_STORED, _DEFLATED, _BZIP2 = 0, 8, 12
_STATUS_DETAIL: Final = {
    "truncated": "the archive ends before this member's last byte",
    "corrupt_member": "the archive's compressed data is damaged in this member",
    "not_a_regular_file": "a symbolic link, device or other special member, not a file",
    "missing": "listed, but the archive has no such member",
    "missing_image": "the sample has no image member (jpg, jpeg, png, webp, ...)",
    "missing_label": "the sample has no usable label",
}


@dataclass(frozen=True)
class ArchivePart:
    """One archive a source reads: its path, size and mtime when scanned, and whether it is
    gzip-compressed (read through a spool)."""

    path: str
    size: int
    mtime_ns: int
    compressed: bool = False


class ArchiveReader(ItemReader):
    """Reads items of archive-backed sources; see the module docstring.

    ``label`` and ``prefix`` make :meth:`where`'s text: ``<label>:<prefix><relpath>``;
    ``nested`` (a tar of class tars) writes ``<label>:<class>.tar:<member>`` instead.
    """

    def __init__(self, parts: tuple[ArchivePart, ...], label: str, *, prefix: str = "",
                 nested: bool = False) -> None:
        self.parts = parts
        self.label = label
        self.prefix = prefix
        self.nested = nested
        self._handles = _Handles(self._open_part)

    def __getstate__(self) -> dict[str, Any]:
        return {"parts": self.parts, "label": self.label, "prefix": self.prefix, "nested": self.nested}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["parts"], state["label"], prefix=state["prefix"],  # type: ignore[misc]
                      nested=state["nested"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ArchiveReader) and self.__getstate__() == other.__getstate__()

    def __hash__(self) -> int:
        return hash((self.parts, self.label, self.prefix, self.nested))

    def where(self, relpath: str) -> str:
        """``archive.tar:cat/x.jpg`` (``train.tar:n01440764.tar:n01440764_10026.JPEG``)."""
        if self.nested and "/" in relpath:
            group, rest = relpath.split("/", 1)
            return f"{self.label}:{self.prefix}{group}.tar:{rest}"
        return f"{self.label}:{self.prefix}{relpath}"

    def known_skip(self, item: SourceItem) -> str | None:
        """The reason the scan already gave the member (truncated, missing label, ...), or None."""
        status = item.locator[2]
        return STATUS_REASONS[status] if status else None

    def read(self, item: SourceItem) -> bytes:
        """The member's bytes; see :meth:`ItemReader.read`."""
        part, offset, status = item.locator[:3]
        if status:
            reason = STATUS_REASONS[status]
            raise UnpackableFile(reason, _STATUS_DETAIL[reason])
        if item.size == 0:
            raise UnpackableFile("empty_file", "the member is empty (0 bytes)")
        with self._handles.use(part) as fd:
            if len(item.locator) == 3:
                return self._pread(part, fd, item.size, offset)
            stored, method, crc = item.locator[3:6]
            data = self._zip_data(part, fd, offset, stored)
        return _unzip(data, method, crc, item.size)

    def dimensions(self, item: SourceItem) -> tuple[int, int] | None:
        """Width and height from the first 64 KiB of a tar member (the whole member when its
        header lies further in, or it is zip-compressed)."""
        part, offset, status = item.locator[:3]
        if len(item.locator) == 3 and status == OK and item.size > _HEADER_BYTES:
            try:
                with self._handles.use(part) as fd:
                    head = self._pread_some(part, fd, _HEADER_BYTES, offset)
            except SourceError:
                return None
            found = image_dimensions(head)
            if found is not None:
                return found
        return super().dimensions(item)

    def close(self) -> None:
        """Close this process's open archives (they reopen on the next read)."""
        self._handles.close()

    def _open_part(self, number: int) -> int:
        part = self.parts[number]
        try:
            fd = os.open(part.path, os.O_RDONLY)
        except OSError as err:
            raise SourceError(f"Cannot open the archive {part.path!r}: {err.strerror or err}. Restore "
                              "it, then run the same conversion again with resume=True.") from err
        status = os.fstat(fd)
        if (status.st_size, status.st_mtime_ns) != (part.size, part.mtime_ns):
            os.close(fd)
            raise SourceError(f"The archive {part.path!r} changed during the conversion (it was "
                              f"{part.size} bytes when scanned, {status.st_size} now, or newer): "
                              "convert again with overwrite=True.")
        if not part.compressed:
            return fd
        os.close(fd)
        spool = ensure_spool(part.path, part.size, part.mtime_ns)
        try:
            return os.open(spool, os.O_RDONLY)
        except OSError as err:
            raise SourceError(f"Cannot open the decompressed copy {spool!r} of {part.path!r}: "
                              f"{err.strerror or err}. Run the same conversion again with "
                              "resume=True.") from err

    def _pread(self, part: int, fd: int, size: int, offset: int) -> bytes:
        try:
            data = os.pread(fd, size, offset)
        except OSError as err:
            raise SourceError(f"Reading {self.parts[part].path!r} failed: {err.strerror or err}. Fix "
                              "the storage, then run the same conversion again with resume=True.") from err
        if len(data) < size:
            raise SourceError(f"The archive {self.parts[part].path!r} is shorter than when it was "
                              "scanned: convert again with overwrite=True.")
        return data

    def _zip_data(self, part: int, fd: int, offset: int, stored: int) -> bytes:
        """A zip member's stored bytes, after its local header."""
        head = self._pread_some(part, fd, LOCAL_HEADER.size + _SLACK + stored, offset)
        try:
            start = local_data_start(head)
        except ValueError:
            raise UnpackableFile("corrupt_member", f"no zip local header at byte {offset}") from None
        if len(head) < start + stored:
            head = self._pread_some(part, fd, start + stored, offset)
        data = head[start:start + stored]
        if len(data) < stored:
            raise UnpackableFile("corrupt_member", "the archive ends inside this member's data")
        return data

    def _pread_some(self, part: int, fd: int, size: int, offset: int) -> bytes:
        try:
            return os.pread(fd, size, offset)
        except OSError as err:
            raise SourceError(f"Reading {self.parts[part].path!r} failed: {err.strerror or err}. Fix "
                              "the storage, then run the same conversion again with resume=True.") from err


class _Handles:
    """This process's open archives, by part number: opened on first use, at most
    :data:`_OPEN_LIMIT` kept, shared by threads (``update --checksum`` hashes in threads), and
    one in use is never closed under a reader. Reset in a forked child, which must not use its
    parent's descriptors (nor a lock another of its threads held)."""

    def __init__(self, opener: Callable[[int], int]) -> None:
        self.opener = opener
        self.pid = -1
        self.lock = threading.Lock()
        self.open: OrderedDict[int, list[int]] = OrderedDict()  # part -> [descriptor, users]

    @contextmanager
    def use(self, part: int) -> Iterator[int]:
        if self.pid != os.getpid():
            self.pid, self.lock, self.open = os.getpid(), threading.Lock(), OrderedDict()
        with self.lock:
            entry = self.open.get(part)
            if entry is None:
                entry = self.open[part] = [self.opener(part), 0]
            self.open.move_to_end(part)
            entry[1] += 1
        try:
            yield entry[0]
        finally:
            with self.lock:
                entry[1] -= 1
                idle = [p for p, (_, users) in self.open.items() if not users]
                for stale in idle[:max(0, len(self.open) - _OPEN_LIMIT)]:
                    os.close(self.open.pop(stale)[0])

    def close(self) -> None:
        if self.pid == os.getpid():
            with self.lock:
                for part in [p for p, (_, users) in self.open.items() if not users]:
                    os.close(self.open.pop(part)[0])


def _unzip(data: bytes, method: int, crc: int, size: int) -> bytes:
    """A zip member's content from its stored bytes, checked against its size and CRC-32."""
    try:
        if method == _STORED:
            content = data
        elif method == _DEFLATED:
            inflater = zlib.decompressobj(-15)
            content = inflater.decompress(data, size + 1)
            if not inflater.eof:
                raise UnpackableFile("corrupt_member", "the deflated data does not end where it should")
        elif method == _BZIP2:
            content = bz2.BZ2Decompressor().decompress(data, size + 1)
        else:
            raise UnpackableFile("decode_error", f"zip compression method {method} is not supported")
    except (zlib.error, OSError, EOFError, ValueError) as err:
        raise UnpackableFile("corrupt_member", f"the compressed data does not decompress ({err})") from None
    if len(content) != size:
        raise UnpackableFile("corrupt_member", f"{len(content)} bytes decompressed, the zip says {size}")
    computed = zlib.crc32(content)
    if computed != crc:
        raise UnpackableFile("corrupt_member", f"CRC-32 mismatch (the zip says {crc:08x}, the bytes "
                             f"give {computed:08x})")
    return content

