"""Read archive members by byte range, from any number of processes at once.

An :class:`ArchiveReader` holds the archives' paths (or URLs) and what they were when scanned
(size, modification time): it pickles small and opens each archive lazily, once per process
(handles are keyed by ``os.getpid()``, so a forked child never uses its parent's), as an
:class:`~packer.source.archive.files.ArchiveFile` (a local file, or an object read by ranges).
A tar member is one ``pread`` at its data offset. A zip member is one ``pread`` of its local header and data
(more, 1 MiB at a time, for a member over 1 MiB); stored data is used as is, deflated (or
bzip2) data is decompressed as it is read, into no more than the size the zip records plus one
byte, and that size and the CRC-32 the zip recorded are checked. A ``.tar.gz`` is read from its
decompressed spool (:mod:`packer.source.archive.spool`), made once per node.

No member is read into memory beyond ``max_bytes`` (:mod:`packer.source.limits`): one whose
recorded size is larger is skipped as ``too_large`` before a byte of it is read, and a zip
member that decompresses to more than it records is ``corrupt_member`` as soon as it does.

Locators are described in :mod:`packer.source.archive.members`. Items the scan already found damaged
(or a list names but the archive lacks, or a WebDataset sample without image or label) carry
a status and are refused with its reason before anything is read.
"""

from __future__ import annotations

import bz2
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from packer.errors import SourceError
from packer.per_process import PerProcess
from packer.sizes import format_size
from packer.source.archive.files import ArchiveFile, open_archive_file
from packer.source.archive.members import OK, STATUS_REASONS
from packer.source.archive.spool import ensure_spool
from packer.source.archive.zipindex import LOCAL_HEADER, local_data_start
from packer.source.base import ItemReader, SourceItem
from packer.source.imagecheck import image_dimensions
from packer.source.limits import DEFAULT_MAX_BYTES
from packer.source.sourcefile import UnpackableFile

__all__ = ["ArchivePart", "ArchiveReader"]

_SLACK: Final = 1024  # bytes read past a zip local header's fixed part for its name and extra
_CHUNK: Final = 1 << 20  # a zip member's stored data is read this much at a time
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
    "missing_member": "the sample lacks a member that fields= makes a field of (the scan's note names it)",
}


@dataclass(frozen=True)
class ArchivePart:
    """One archive a source reads: its path, size and mtime when scanned, and whether it is
    gzip-compressed (read through a spool); then also how many bytes it decompresses to (-1:
    not known) and the decompressed ranges nobody reads (members over ``max_bytes``), which
    the spool leaves as holes."""

    path: str
    size: int
    mtime_ns: int
    compressed: bool = False
    expanded: int = -1
    holes: tuple[tuple[int, int], ...] = ()


class ArchiveReader(ItemReader):
    """Reads items of archive-backed sources; see the module docstring.

    ``label`` and ``prefix`` make :meth:`where`'s text: ``<label>:<prefix><relpath>``;
    ``nested`` (a tar of class tars) writes ``<label>:<class>.tar:<member>`` instead. Members
    over ``max_bytes`` are ``too_large``.
    """

    def __init__(self, parts: tuple[ArchivePart, ...], label: str, *, prefix: str = "",
                 nested: bool = False, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.parts = parts
        self.label = label
        self.prefix = prefix
        self.nested = nested
        self.max_bytes = max_bytes
        self._handles = _Handles(self._open_part)

    def __getstate__(self) -> dict[str, Any]:
        return {"parts": self.parts, "label": self.label, "prefix": self.prefix, "nested": self.nested,
                "max_bytes": self.max_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["parts"], state["label"], prefix=state["prefix"],  # type: ignore[misc]
                      nested=state["nested"], max_bytes=state["max_bytes"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ArchiveReader) and self.__getstate__() == other.__getstate__()

    def __hash__(self) -> int:
        return hash((self.parts, self.label, self.prefix, self.nested, self.max_bytes))

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
            raise UnpackableFile(reason, self._detail(reason))
        if item.size == 0:
            raise UnpackableFile("empty_file", "the member is empty (0 bytes)")
        if item.size > self.max_bytes:
            raise UnpackableFile("too_large", self._detail("too_large"))
        with self._handles.use(part) as file:
            if len(item.locator) == 3:
                return self._pread(part, file, item.size, offset)
            stored, method, crc = item.locator[3:6]
            if method not in (_STORED, _DEFLATED, _BZIP2):
                raise UnpackableFile("decode_error", f"zip compression method {method} is not supported")
            if method == _STORED and stored != item.size:
                raise UnpackableFile("corrupt_member", f"a stored member of {stored} bytes, but the zip "
                                     f"says it holds {item.size}")
            return _unzip(self._zip_data(part, file, offset, stored), method, crc, item.size)

    def _detail(self, reason: str) -> str:
        if reason == "too_large":
            return (f"the archive says it holds more than max_bytes ({format_size(self.max_bytes)}): "
                    "raise max_bytes to pack it")
        return _STATUS_DETAIL[reason]

    def dimensions(self, item: SourceItem) -> tuple[int, int] | None:
        """Width and height from the first 64 KiB of a tar member (the whole member when its
        header lies further in, or it is zip-compressed)."""
        part, offset, status = item.locator[:3]
        if len(item.locator) == 3 and status == OK and item.size > _HEADER_BYTES:
            try:
                with self._handles.use(part) as file:
                    head = self._pread_some(part, file, _HEADER_BYTES, offset)
            except SourceError:
                return None
            found = image_dimensions(head)
            if found is not None:
                return found
        return super().dimensions(item)

    def close(self) -> None:
        """Close this process's open archives (they reopen on the next read)."""
        self._handles.close()

    def _open_part(self, number: int) -> ArchiveFile:
        part = self.parts[number]
        try:
            file = open_archive_file(part.path)
        except OSError as err:
            raise SourceError(f"Cannot open the archive {part.path!r}: {err.strerror or err}. Restore "
                              "it, then run the same conversion again with resume=True.") from err
        if (file.size, file.mtime_ns) != (part.size, part.mtime_ns):
            file.close()
            raise SourceError(f"The archive {part.path!r} changed during the conversion (it was "
                              f"{part.size} bytes when scanned, {file.size} now, or newer): "
                              "convert again with overwrite=True.")
        if not part.compressed:
            return file
        file.close()
        spool = ensure_spool(part.path, part.size, part.mtime_ns, expanded=part.expanded, holes=part.holes)
        try:
            return open_archive_file(spool)
        except OSError as err:
            raise SourceError(f"Cannot open the decompressed copy {spool!r} of {part.path!r}: "
                              f"{err.strerror or err}. Run the same conversion again with "
                              "resume=True.") from err

    def _pread(self, part: int, file: ArchiveFile, size: int, offset: int) -> bytes:
        try:
            data = file.pread(size, offset)
        except OSError as err:
            raise SourceError(f"Reading {self.parts[part].path!r} failed: {err.strerror or err}. Fix "
                              "the storage, then run the same conversion again with resume=True.") from err
        if len(data) < size:
            raise SourceError(f"The archive {self.parts[part].path!r} is shorter than when it was "
                              "scanned: convert again with overwrite=True.")
        return data

    def _zip_data(self, part: int, file: ArchiveFile, offset: int, stored: int) -> Iterator[bytes]:
        """A zip member's ``stored`` bytes after its local header: one ``pread`` with the header,
        then (for a member over 1 MiB) 1 MiB at a time, as the decompression asks for them."""
        head = self._pread_some(part, file, LOCAL_HEADER.size + _SLACK + min(stored, _CHUNK), offset)
        try:
            start = local_data_start(head)
        except ValueError:
            raise UnpackableFile("corrupt_member", f"no zip local header at byte {offset}") from None
        data = head[start:start + stored]
        position, left = offset + start + len(data), stored - len(data)
        while True:
            if data:
                yield data
            if left <= 0:
                return
            data = self._pread_some(part, file, min(left, _CHUNK), position)
            if not data:
                raise UnpackableFile("corrupt_member", "the archive ends inside this member's data")
            position, left = position + len(data), left - len(data)

    def _pread_some(self, part: int, file: ArchiveFile, size: int, offset: int) -> bytes:
        try:
            return file.pread(size, offset)
        except OSError as err:
            raise SourceError(f"Reading {self.parts[part].path!r} failed: {err.strerror or err}. Fix "
                              "the storage, then run the same conversion again with resume=True.") from err


class _Handles:
    """This process's open archives, by part number: opened on first use, at most
    :data:`_OPEN_LIMIT` kept, shared by threads (``update --checksum`` hashes in threads), and
    one in use is never closed under a reader. Reset in a forked child, which must not use its
    parent's descriptors (nor a lock another of its threads held)."""

    def __init__(self, opener: Callable[[int], ArchiveFile]) -> None:
        self.opener = opener
        self.here: PerProcess[_Open] = PerProcess(_Open)

    @contextmanager
    def use(self, part: int) -> Iterator[ArchiveFile]:
        state = self.here.get()
        with state.lock:
            entry = state.open.get(part)
            if entry is None:
                entry = state.open[part] = [self.opener(part), 0]
            state.open.move_to_end(part)
            entry[1] += 1
        try:
            yield entry[0]
        finally:
            with state.lock:
                entry[1] -= 1
                idle = [p for p, (_, users) in state.open.items() if not users]
                for stale in idle[:max(0, len(state.open) - _OPEN_LIMIT)]:
                    state.open.pop(stale)[0].close()

    def close(self) -> None:
        state = self.here.current()
        if state is not None:
            with state.lock:
                for part in [p for p, (_, users) in state.open.items() if not users]:
                    state.open.pop(part)[0].close()


class _Open:
    """One process's open archives (part -> [file, users]) and the lock guarding them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: OrderedDict[int, list[Any]] = OrderedDict()


def _unzip(chunks: Iterable[bytes], method: int, crc: int, size: int) -> bytes:
    """A zip member's content from its stored bytes (``chunks``), checked against its size and
    CRC-32; never more than ``size + 1`` bytes are decompressed."""
    try:
        content = b"".join(chunks) if method == _STORED else _inflate(chunks, method, size)
    except (zlib.error, OSError, EOFError, ValueError) as err:
        raise UnpackableFile("corrupt_member", f"the compressed data does not decompress ({err})") from None
    if len(content) != size:
        raise UnpackableFile("corrupt_member", f"{len(content)} bytes decompressed, the zip says {size}")
    computed = zlib.crc32(content)
    if computed != crc:
        raise UnpackableFile("corrupt_member", f"CRC-32 mismatch (the zip says {crc:08x}, the bytes "
                             f"give {computed:08x})")
    return content


def _inflate(chunks: Iterable[bytes], method: int, size: int) -> bytes:
    """Deflated or bzip2 ``chunks`` decompressed, stopping past ``size`` (a bomb, or a zip that
    lies about the size: refused before more than one byte too many is held)."""
    out: list[bytes] = []
    room = size + 1
    engine: Any = zlib.decompressobj(-15) if method == _DEFLATED else bz2.BZ2Decompressor()
    for chunk in chunks:
        while room > 0 and not engine.eof:
            piece = engine.decompress(chunk, room)
            out.append(piece)
            room -= len(piece)
            chunk = engine.unconsumed_tail if method == _DEFLATED else b""
            if not chunk and (method == _DEFLATED or engine.needs_input):
                break
        if engine.eof or room <= 0:
            break
    if room <= 0:
        raise UnpackableFile("corrupt_member", f"the data decompresses to more than the {size} bytes "
                             "the zip says")
    if not engine.eof:
        raise UnpackableFile("corrupt_member", "the compressed data does not end where it should")
    return b"".join(out)
