"""Decompress a gzip file as a stream, checking each gzip member's CRC-32 and length.

``.tar.gz`` archives are read from start to end to index the tar
(:mod:`packer.source.archive.tarindex`), the spool workers read by range written meanwhile
(:mod:`packer.source.archive.spool`), or again to make it where the index did not. Python's
:class:`gzip.GzipFile` checks a member's trailer only when a read reaches it and then raises, so
a reader that stops at the tar's end marker never sees a bad CRC, and one that catches the error
cannot tell which bytes it covers. :class:`GzipStream` inflates raw deflate data itself and
checks every gzip member's trailer (CRC-32 and ISIZE, the length modulo 2**32) as it passes: a
member that fails is not an error but a damaged range, ``(start, end, why)`` in decompressed
bytes (:attr:`GzipStream.damaged`), and the stream goes on with the next member.

Deflate data is inflated in fixed slices of the compressed stream (32 KiB), whatever the reads
ask for: so memory stays one slice's output (at most 32 MiB, deflate's ratio being 1032:1)
and, above all, a stream that breaks breaks at the same decompressed byte for every reader: the
index and the spool agree on where a damaged archive ends. A slice that breaks is inflated
again in 512-byte steps, so what precedes the damage is kept. What cannot be decompressed
raises, after everything before it was read: :class:`EOFError` where the file ends inside a
member (a truncated download), :class:`zlib.error` on bad deflate data,
:class:`gzip.BadGzipFile` on a bad member header.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from typing import IO, Final

__all__ = ["GzipStream"]

_INPUT: Final = 1 << 17  # compressed bytes read at a time
_SLICE: Final = 1 << 15  # compressed bytes inflated at a time
_STEP: Final = 512  # ... and, in a slice that breaks, to find what precedes the damage
_MAGIC: Final = b"\x1f\x8b"
_FHCRC, _FEXTRA, _FNAME, _FCOMMENT = 0x02, 0x04, 0x08, 0x10
_NAME_LIMIT: Final = 1 << 16  # a header's file name or comment longer than this is damage


class GzipStream:
    """The decompressed bytes of the gzip file ``handle`` reads (one member or several, zero
    padding between them allowed, as ``gzip`` allows it); see the module docstring."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.pending = b""  # read from the file, not yet inflated
        self.inflater: zlib._Decompress | None = None  # None between gzip members
        self.ready = b""  # inflated, not yet delivered from ``ready_at`` on
        self.ready_at = 0
        self.broken: zlib.error | None = None  # raised once what precedes it is delivered
        self.crc = 0
        self.length = 0  # of the current member's decompressed data
        self.member_start = 0
        self.produced = 0  # decompressed bytes inflated so far
        #: Decompressed bytes delivered so far.
        self.position = 0
        #: Decompressed ranges whose gzip member failed its trailer check: ``(start, end, why)``.
        self.damaged: list[tuple[int, int, str]] = []
        self.members = 0

    def read1(self, size: int) -> bytes:
        """Up to ``size`` (at least 1) decompressed bytes; ``b""`` at the end of the file.

        Raises:
            EOFError: the file ends inside a gzip member.
            zlib.error: the deflate data is damaged.
            gzip.BadGzipFile: a member header is damaged, or the file is no gzip at all.
        """
        while self.ready_at >= len(self.ready):
            if not self._inflate():
                return b""
        out = self.ready[self.ready_at:self.ready_at + max(1, size)]
        self.ready_at += len(out)
        self.position += len(out)
        return out

    def _inflate(self) -> bool:
        """Inflate the next slice of the current member (checking the member that just ended,
        or starting the next one, if need be) into ``ready``; False at the end of the file."""
        if self.broken is not None:
            raise self.broken
        if self.inflater is not None and self.inflater.eof:
            self._end_member()  # only now: what it inflated was delivered first
        inflater = self.inflater or self._begin_member()
        if inflater is None:
            return False
        if not self._fill(_SLICE) and not self.pending:
            raise EOFError("the gzip stream ends before its end-of-stream marker (a truncated file)")
        piece, self.pending = self.pending[:_SLICE], self.pending[_SLICE:]
        saved = inflater.copy()
        try:
            out = inflater.decompress(piece)
        except zlib.error:
            inflater = self.inflater = saved
            out = self._salvage(inflater, piece)
        self.ready, self.ready_at = out, 0
        self.crc = zlib.crc32(out, self.crc)
        self.length += len(out)
        self.produced += len(out)
        if inflater.eof:
            self.pending = inflater.unused_data + self.pending
        return True

    def _salvage(self, inflater: zlib._Decompress, piece: bytes) -> bytes:
        """What ``piece`` (a slice that breaks) inflates to before the damage, a step at a time
        from the state before it; the error is kept for the next read."""
        out: list[bytes] = []
        for start in range(0, len(piece), _STEP):
            try:
                out.append(inflater.decompress(piece[start:start + _STEP]))
            except zlib.error as err:
                self.broken = err
                break
        return b"".join(out)

    def _fill(self, at_least: int = 1) -> bool:
        """Read input until ``pending`` holds ``at_least`` bytes; False at the file's end."""
        while len(self.pending) < at_least:
            chunk = self.handle.read(_INPUT)
            if not chunk:
                return False
            self.pending += chunk
        return True

    def _take(self, count: int) -> bytes:
        if not self._fill(count):
            raise EOFError("the gzip stream ends inside a member header or trailer (a truncated file)")
        taken, self.pending = self.pending[:count], self.pending[count:]
        return taken

    def _begin_member(self) -> zlib._Decompress | None:
        """Read the next member's header and start inflating it; None at the file's end (zero
        padding after a member allowed)."""
        while True:
            if not self._fill():
                if self.members == 0:
                    raise gzip.BadGzipFile("empty file: no gzip member")
                return None
            if self.members:
                self.pending = self.pending.lstrip(b"\0")
            if self.pending:
                break
        header = self._take(10)
        if header[:2] != _MAGIC:
            raise gzip.BadGzipFile(f"not a gzip member after byte {self.produced} of the stream "
                                   f"(starts {header[:2]!r})")
        if header[2] != 8:
            raise gzip.BadGzipFile(f"unknown gzip compression method {header[2]}")
        flags = header[3]
        if flags & _FEXTRA:
            (extra,) = struct.unpack("<H", self._take(2))
            self._take(extra)
        for flag in (_FNAME, _FCOMMENT):
            if flags & flag:
                self._skip_text()
        if flags & _FHCRC:
            self._take(2)
        self.inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        self.crc, self.length, self.member_start = 0, 0, self.produced
        self.members += 1
        return self.inflater

    def _skip_text(self) -> None:
        """Skip a zero-terminated header field (a file name or comment)."""
        while (end := self.pending.find(b"\0")) < 0:
            if len(self.pending) > _NAME_LIMIT or not self._fill(len(self.pending) + 1):
                raise gzip.BadGzipFile("a gzip member header's name or comment does not end")
        self.pending = self.pending[end + 1:]

    def _end_member(self) -> None:
        """Check the trailer of the member just inflated; a mismatch is a damaged range."""
        crc, length = struct.unpack("<II", self._take(8))
        why = ""
        if crc != self.crc:
            why = f"CRC-32 mismatch (the gzip trailer says {crc:08x}, the data gives {self.crc:08x})"
        elif length != self.length & 0xFFFFFFFF:
            why = (f"length mismatch (the gzip trailer says {length} bytes modulo 2**32, the data "
                   f"gives {self.length})")
        if why:
            self.damaged.append((self.member_start, self.produced, why))
        self.inflater = None
