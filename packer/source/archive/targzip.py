"""A ``.tar.gz`` as the tar index streams it: the decompressed bytes tarfile reads, what became
of them, and the members a failed gzip check spoils.

:class:`GzipTail` sits between :class:`~packer.source.archive.gunzip.GzipStream` and tarfile: it counts
what it delivered, keeps its last bytes (to look at the header a walk stopped on) and remembers
the failure that ended it. After a failure it reads as the end of the data, so every byte before
it is still used (tarfile would drop what it buffered if a read raised). When the walk is done,
:func:`finish_stream` decompresses the rest (so every gzip member's CRC-32 and length are
checked, and the decompressed size is known) and marks the members that lie in a gzip member
whose check failed as ``CORRUPT``, with a note: their bytes decompressed, but not to what was
compressed.
"""

from __future__ import annotations

import tarfile
import zlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Final

from packer.source.archive.gunzip import GzipStream
from packer.source.archive.members import CORRUPT, FILE, Inner, Member

__all__ = ["STREAM_DAMAGE", "GzipTail", "finish_stream"]

#: What a damaged gzip stream raises while it is read.
STREAM_DAMAGE: Final = (EOFError, zlib.error, OSError)
_BLOCK: Final = tarfile.BLOCKSIZE
_WINDOW: Final = 1 << 16  # how much of the stream is kept to look at the header a walk stopped on
_DRAIN: Final = 1 << 20  # what is left after the tar's end is decompressed this much at a time


class GzipTail:
    """A gzip stream as tarfile reads it (see the module docstring)."""

    def __init__(self, raw: GzipStream, sink: Callable[[int, bytes], None] | None = None) -> None:
        self.raw = raw
        self.sink = sink  # given each decompressed chunk and its position (a spool written meanwhile)
        self.delivered = 0
        self.window = bytearray()
        self.failure: BaseException | None = None

    def read(self, size: int = -1) -> bytes:
        chunks: list[bytes] = []
        got = 0
        while self.failure is None and (size < 0 or got < size):
            try:
                chunk = self.raw.read1(size - got if size > 0 else _DRAIN)
            except STREAM_DAMAGE as err:
                self.failure = err
                break
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        data = b"".join(chunks)
        self._deliver(data)
        self.window += data
        if len(self.window) > 2 * _WINDOW:
            del self.window[:-_WINDOW]
        return data

    def drain(self) -> None:
        """Decompress the rest of the stream, so that every gzip member's check is made and
        :attr:`delivered` is the whole decompressed size."""
        while self.failure is None:
            try:
                chunk = self.raw.read1(_DRAIN)
            except STREAM_DAMAGE as err:
                self.failure = err
                break
            if not chunk:
                break
            self._deliver(chunk)

    def _deliver(self, data: bytes) -> None:
        """Count ``data`` as delivered (and hand it to the sink, if any)."""
        if self.sink is not None:
            self.sink(self.delivered, data)
        self.delivered += len(data)

    def block_at(self, position: int) -> bytes:
        start = self.delivered - len(self.window)
        if position < start:
            return b"\0" * _BLOCK  # long gone: unknown, taken as the end marker
        return bytes(self.window[position - start: position - start + _BLOCK])


def finish_stream(path: str, tail: GzipTail, members: tuple[Member, ...], inner: Mapping[str, Inner],
                  notes: list[str]) -> tuple[tuple[Member, ...], dict[str, Inner], list[str]]:
    """After the walk: drain ``tail`` and mark the members (``inner`` tars' too) in each gzip
    member that failed its check ``CORRUPT``, with a note each; a stream that breaks after the
    tar's end gets a note too."""
    ended = tail.failure
    tail.drain()
    notes = list(notes)
    if ended is None and tail.failure is not None:
        notes.append(f"{path!r}: its gzip stream is damaged after the tar's last member ({tail.failure}), "
                     "so its gzip check could not be made; the members were read as they decompressed.")
    listings = dict(inner)
    for start, end, why in tail.raw.damaged:
        hit: list[str] = []
        members = _mark(members, start, end, hit)
        listings = {name: replace(listing, members=_mark(listing.members, start, end, hit))
                    for name, listing in listings.items()}
        if hit:
            names = ", ".join(map(repr, hit[:3])) + (f" and {len(hit) - 3} more" if len(hit) > 3 else "")
            notes.append(f"{path!r} fails its gzip check in bytes {start} to {end} of its decompressed "
                         f"data ({why}): its {len(hit)} member(s) there ({names}) are skipped as "
                         "corrupt_member.")
    return members, listings, notes


def _mark(members: tuple[Member, ...], start: int, end: int, hit: list[str]) -> tuple[Member, ...]:
    """``members`` with those whose header or data lie in ``start:end`` ``CORRUPT`` (named in ``hit``)."""
    marked = []
    for member in members:
        if member.kind == FILE and not member.status and member.offset - _BLOCK < end and \
                member.offset + member.size > start:
            member = member._replace(status=CORRUPT)
            hit.append(member.name)
        marked.append(member)
    return tuple(marked)
