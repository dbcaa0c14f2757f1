"""Plain tar headers parsed at C speed: the common case of an uncompressed tar's walk.

``tarfile`` spends about 19 us a member in Python (a dozen fields parsed one by one, a
``TarInfo`` built, a read per header). :class:`PlainHeaders` reads the header at a position
with one ``struct`` unpack and checks it with ``zlib.adler32`` (a 256-byte half of a header
sums below adler's modulus, so its sum is exact), in under 2 us. It reads only *plain* headers:
a regular file, directory, link or device whose fields ``tarfile`` would read the same way
(octal numbers, the unsigned checksum, no pax or GNU long-name header before it). For anything
else (a pax or GNU extension header, a sparse file, a base-256 number, a bad checksum, the end
marker, the archive's end) it answers None and the walk lets ``tarfile`` read that one member
from the same position. So a listing is ``tarfile``'s, member for member and note for note,
whichever reads each header (tests/test_tarheaders.py compares the two on damaged archives).

Headers are read by range: where members are small (the last one spanned at most
:data:`SMALL_SPAN`), :data:`WINDOW` bytes at a time, so that a tar of thumbnails costs a read per
thousand members; else 512 bytes a header, so that a tar of large images is never read whole.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Final

__all__ = ["SMALL_SPAN", "WINDOW", "PlainHeaders"]

#: Bytes read at a time while members are small.
WINDOW: Final = 1 << 20
#: A member spanning (header and data) at most this much is small.
SMALL_SPAN: Final = 16 << 10
_BLOCK: Final = 512
#: name, mode+uid+gid, size, mtime, checksum, type, linkname, devmajor+devminor, prefix
_LAYOUT: Final = struct.Struct("100s24s12s12s8sc100s72x16s155s")
_REGULAR: Final = (b"0", b"\0", b"7")  # tarfile's REGULAR_TYPES less the sparse type
_KINDS: Final = {b"5": "dir", b"1": "hardlink", b"2": "symlink", b"3": "special", b"4": "special",
                 b"6": "special", **{t: "file" for t in _REGULAR}}
_KNOWN_LIMIT: Final = 4096  # distinct valid id/device fields remembered (a hostile tar: all distinct)

#: What :meth:`PlainHeaders.read` gives: name, kind ("file", "dir", "hardlink", "symlink",
#: "special"), data offset, size, mtime (seconds), link target, position of the next header.
Plain = tuple[str, str, int, int, int, str, int]


class PlainHeaders:
    """The plain headers of a tar whose bytes ``read_at(position, count)`` gives (positions
    relative to the tar's start); names decoded as ``tarfile`` does (``encoding``, ``errors``)."""

    def __init__(self, read_at: Callable[[int, int], bytes], encoding: str, errors: str) -> None:
        self.read_at, self.encoding, self.errors = read_at, encoding, errors
        self.window, self.window_at = b"", 0
        self.small = True  # whether the last member read was small
        self.known: set[bytes] = set()  # id and device fields found valid

    def read(self, position: int, limit: int, most: int = 4096) -> list[Plain]:
        """The plain headers from ``position`` on (at most ``most``), the tar being ``limit``
        bytes long, up to the first that is not plain or the tar's end (``tarfile`` is to say
        what is there: at the position the last one gives, or ``position`` if none). One loop,
        no call a header: a call costs as much as a field's parsing."""
        found: list[Plain] = []
        window, at = self.window, position - self.window_at
        encoding, errors, known = self.encoding, self.errors, self.known
        unpack, adler32 = _LAYOUT.unpack_from, zlib.adler32
        while len(found) < most:
            if at < 0 or at + _BLOCK > len(window):
                at = self._refill(position, limit)
                if at < 0:
                    break
                window = self.window
            name, ids, size, mtime, checksum, kind, link, devices, prefix = unpack(window, at)
            kind_name = _KINDS.get(kind)
            if kind_name is None:
                break
            header = window[at:at + _BLOCK]
            if header.isascii():  # 512 bytes below 128 sum below 65521: one adler32 is exact
                total = (adler32(header) & 0xFFFF) - 1
            else:  # a 256-byte half sums below 65521
                total = (adler32(header[:256]) & 0xFFFF) + (adler32(header[256:]) & 0xFFFF) - 2
            try:  # the unsigned checksum, its field read as eight spaces (a signed one is tarfile's)
                if total - sum(checksum) + 256 != int(checksum.split(b"\0", 1)[0], 8):
                    break
                size_value = int(size.split(b"\0", 1)[0], 8)
                mtime_value = int(mtime.split(b"\0", 1)[0], 8)
            except ValueError:  # blank, base-256 or damaged: tarfile's reading decides
                break
            if size_value < 0 or (ids not in known or devices not in known) and not self._valid(ids, devices):
                break
            text = name.split(b"\0", 1)[0].decode(encoding, errors)
            if kind == b"\0" and text.endswith("/"):
                kind_name = "dir"  # old V7 tars mark a directory so
            if kind_name == "dir":
                text = text.rstrip("/")
            if prefix[0]:
                text = prefix.split(b"\0", 1)[0].decode(encoding, errors) + "/" + text
                if kind_name == "dir":
                    text = text.rstrip("/")
            span = _BLOCK + (-(-size_value // _BLOCK) * _BLOCK if kind_name == "file" else 0)
            target = link.split(b"\0", 1)[0].decode(encoding, errors) if link[0] else ""
            found.append((text, kind_name, position + _BLOCK, size_value, mtime_value, target,
                          position + span))
            self.small = span <= SMALL_SPAN
            position += span
            at += span
        return found

    def _refill(self, position: int, limit: int) -> int:
        """Read the tar from ``position`` into :attr:`window`: 0, or -1 when fewer than 512 bytes of
        it are left there."""
        if limit - position < _BLOCK:
            return -1
        count = min(WINDOW if self.small else _BLOCK, limit - position)
        self.window, self.window_at = self.read_at(position, count), position
        return 0 if len(self.window) >= _BLOCK else -1

    def _valid(self, ids: bytes, devices: bytes) -> bool:
        """Whether tarfile reads the mode, uid, gid, devmajor and devminor fields as numbers
        (remembered, so that the same fields are checked once)."""
        for field in (ids, devices):
            if field in self.known:
                continue
            if not all(_number_valid(field[i:i + 8]) for i in range(0, len(field), 8)):
                return False
            if len(self.known) >= _KNOWN_LIMIT:
                self.known.clear()
            self.known.add(field)
        return True


def _number_valid(field: bytes) -> bool:
    """Whether tarfile's ``nti`` reads ``field`` (base-256, or octal once cut at a NUL)."""
    if field[0] in (0o200, 0o377):
        return True
    try:
        int(field.split(b"\0", 1)[0].decode("ascii").strip() or "0", 8)
    except (ValueError, UnicodeDecodeError):
        return False
    return True
