"""Index a zip archive from its central directory (or, when that is gone, its local headers).

The central directory at the end of a zip names every member with its local header's offset,
compression method, sizes, CRC-32 and DOS date; reading it reads nothing of the members. A
truncated zip has lost its central directory: then the members are found by walking the local
headers from the start, which recovers every member before the cut (the one the cut runs
through is ``TRUNCATED``) and notes where the archive ends. Members whose sizes only a data
descriptor after their data gives (zips written to a pipe) stop that walk, with a note.
Members named outside the archive (with ``..``) are ignored and counted in a note, as a tar's are.
"""

from __future__ import annotations

import stat
import struct
import zipfile
from typing import Final

from packer.errors import SourceError
from packer.source.archive.files import ArchiveFile, open_archive_file
from packer.source.archive.members import (
    DIR,
    FILE,
    LINK,
    SPECIAL,
    TRUNCATED,
    Listing,
    Member,
    clean_name,
    unsafe_note,
    zip_time_ns,
)

__all__ = ["LOCAL_HEADER", "index_zip", "local_data_start"]

#: A local file header: signature, versions, flags, method, time, date, CRC, sizes, name and extra lengths.
LOCAL_HEADER: Final = struct.Struct("<4sHHHHHIIIHH")
_LOCAL_SIGNATURE: Final = b"PK\x03\x04"
_ZIP64_EXTRA: Final = 0x0001


def _kind(external_attr: int, is_dir: bool) -> str:
    mode = external_attr >> 16
    if is_dir or stat.S_ISDIR(mode):
        return DIR
    if stat.S_ISLNK(mode):
        return LINK
    if stat.S_IFMT(mode) and not stat.S_ISREG(mode):  # no type bits (Python's writestr): a file
        return SPECIAL
    return FILE


def _from_central(file: ArchiveFile) -> tuple[list[Member], int]:
    """The members the central directory lists, and how many are named outside the archive."""
    with zipfile.ZipFile(file.stream()) as archive:
        infos = archive.infolist()
    members = []
    unsafe = 0
    for info in infos:
        name = clean_name(info.filename)
        unsafe += name is None
        if not name:
            continue
        members.append(Member(name, _kind(info.external_attr, info.is_dir()), info.header_offset,
                              info.file_size, zip_time_ns(info.date_time), stored=info.compress_size,
                              method=info.compress_type, crc=info.CRC,
                              encrypted=bool(info.flag_bits & 0x1)))
    return members, unsafe


def local_data_start(header: bytes) -> int:
    """Where a member's data starts, counted from its local header (which ``header`` begins with).

    Raises:
        ValueError: ``header`` is not a local file header.
    """
    if len(header) < LOCAL_HEADER.size or header[:4] != _LOCAL_SIGNATURE:
        raise ValueError("no local file header there")
    fields = LOCAL_HEADER.unpack_from(header)
    return LOCAL_HEADER.size + int(fields[9]) + int(fields[10])


def _zip64_sizes(extra: bytes, size: int, stored: int) -> tuple[int, int]:
    """The sizes a zip64 extra field gives for those the header marks 0xFFFFFFFF."""
    position = 0
    while position + 4 <= len(extra):
        kind, length = struct.unpack_from("<HH", extra, position)
        if kind == _ZIP64_EXTRA:
            values = extra[position + 4: position + 4 + length]
            fields = [struct.unpack_from("<Q", values, i)[0] for i in range(0, len(values) - 7, 8)]
            if size == 0xFFFFFFFF and fields:
                size = fields.pop(0)
            if stored == 0xFFFFFFFF and fields:
                stored = fields.pop(0)
            break
        position += 4 + length
    return size, stored


def _from_local_headers(path: str, file: ArchiveFile) -> tuple[list[Member], list[str], int]:
    """Walk the local headers from the start (the central directory is missing); also count
    the members named outside the archive."""
    members: list[Member] = []
    notes: list[str] = []
    unsafe = 0
    position, file_size = 0, file.size
    while True:
        head = file.pread(LOCAL_HEADER.size, position)
        if len(head) < LOCAL_HEADER.size or head[:4] != _LOCAL_SIGNATURE:
            if head[:4] == b"PK\x01\x02":  # the central directory: every member was found
                return members, notes, unsafe
            break
        fields = LOCAL_HEADER.unpack(head)
        flags, method, time, date, crc, stored, size, name_len, extra_len = fields[2:]
        raw = file.pread(name_len + extra_len, position + LOCAL_HEADER.size)
        if len(raw) < name_len + extra_len:
            break
        name_bytes, extra = raw[:name_len], raw[name_len:]
        text = name_bytes.decode("utf-8" if flags & 0x800 else "cp437", "surrogateescape")
        size, stored = _zip64_sizes(extra, size, stored)
        date_time = ((date >> 9) + 1980, (date >> 5) & 0xF, date & 0x1F, time >> 11, (time >> 5) & 0x3F,
                     (time & 0x1F) * 2)
        data_start = position + LOCAL_HEADER.size + name_len + extra_len
        name = clean_name(text)
        unsafe += name is None
        if flags & 0x8:
            notes.append(f"{path!r}: member {text!r} keeps its sizes after its data (a zip written "
                         "to a pipe), so the members after it cannot be found without the central "
                         "directory; re-create the zip.")
            break
        if name:
            cut = data_start + stored > file_size
            members.append(Member(name, DIR if text.endswith("/") else FILE, position, size,
                                  zip_time_ns(date_time), TRUNCATED if cut else 0, stored, method, crc,
                                  bool(flags & 0x1)))
            if cut:
                notes.append(f"{path!r} is cut short at byte {file_size}: member {name!r} ends past "
                             "it (skipped as truncated).")
                return members, notes, unsafe
        position = data_start + stored
    if position < file_size and not notes:
        notes.append(f"{path!r} has no member header at byte {position} (cut short or damaged): members "
                     "after that point are missing.")
    return members, notes, unsafe


def index_zip(path: str) -> Listing:
    """Index the zip at ``path`` from its central directory, or its local headers when that is
    missing (a truncated zip: see the module docstring).

    Raises:
        SourceError: ``path`` cannot be read, or is not a zip at all.
    """
    try:
        with open_archive_file(path) as file:
            return _index(path, file)
    except OSError as err:
        raise SourceError(f"Cannot read the archive {path!r}: {err.strerror or err}.") from None


def _index(path: str, file: ArchiveFile) -> Listing:
    """:func:`index_zip` on the open ``file``."""
    try:
        members, unsafe = _from_central(file)
        notes: list[str] = []
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as err:
        start = file.pread(4, 0)
        if start != _LOCAL_SIGNATURE:
            raise SourceError(f"{path!r} is not a valid zip archive ({err}): give a .tar, .tar.gz "
                              "(.tgz) or .zip of an ImageFolder tree, re-download it if it is "
                              "damaged, or name the kind of source with source_format=.") from None
        members, notes, unsafe = _from_local_headers(path, file)
        notes.insert(0, f"{path!r} has no central directory ({err}; a truncated download?): its "
                        f"members were found from their local headers ({len(members)} found).")
    if unsafe:
        notes.append(unsafe_note(repr(path), unsafe))
    return Listing(path, "zip", file.size, file.mtime_ns, tuple(members), tuple(notes))
