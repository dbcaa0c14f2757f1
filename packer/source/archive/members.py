"""What indexing an archive gives: one record per member, read from headers alone.

A :class:`Member` is a tar or zip member as its header describes it: a clean POSIX path, what
kind of entry it is, where its bytes lie (a tar member's data offset; a zip member's local
header offset, its stored size, compression method and CRC-32), its size and modification time,
and whether the archive's damage cut it (:data:`TRUNCATED`, :data:`CORRUPT`). A size is what
the header claims, cut to what the archive holds where that is known (a tar's); an item over
the ``max_bytes`` bound is :data:`TOO_LARGE` (:func:`bounded_item`). A
:class:`Listing` is a whole archive's members plus one-sentence notes on what was odd about it.
The same records serve every archive-backed source (a tree in an archive, a list file's archive
root, WebDataset shards); their readers turn a member into a :class:`SourceItem` locator.

Locators (``SourceItem.locator``), as :mod:`packer.source.archive.reader` reads them:
``(part, offset, status)`` for tar data (``part``: which archive of the source, 0 for one),
``(part, offset, status, stored, method, crc)`` for a zip member.
"""

from __future__ import annotations

import calendar
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from packer.source.statuses import (
    CORRUPT,
    MISSING,
    MISSING_IMAGE,
    MISSING_LABEL,
    NOT_REGULAR,
    OK,
    STATUS_REASONS,
    TOO_LARGE,
    TRUNCATED,
)

__all__ = ["CORRUPT", "DIR", "FILE", "LINK", "MISSING", "MISSING_IMAGE", "MISSING_LABEL", "NOT_REGULAR",
           "OK", "SPECIAL", "STATUS_REASONS", "TAR_DATA", "TOO_LARGE", "TRUNCATED", "Inner", "Listing",
           "Member", "bounded_item", "clean_name", "unsafe_note", "zip_time_ns"]

#: Member kinds.
FILE: Final = "file"
DIR: Final = "dir"
LINK: Final = "link"  # a symbolic link (hard links are resolved to their target's data)
SPECIAL: Final = "special"  # a device, FIFO, sparse file or unknown type

#: Item statuses (the third field of a locator): what the reader raises instead of reading.
#: They are the shared table of :mod:`packer.source.statuses`, re-exported here.

#: ``Member.method`` of tar data (stored as is); zip members carry their compression method.
TAR_DATA: Final = -1


class Member(NamedTuple):
    """One archive member, from its header; nothing of its data has been read. A named tuple:
    an index makes one a member (1.28M for ImageNet), and a tuple is made in a third of a frozen
    dataclass's time; ``member._replace(...)`` gives a changed copy."""

    name: str
    kind: str
    offset: int
    size: int
    mtime_ns: int
    status: int = OK
    stored: int = -1  # zip: the compressed size
    method: int = TAR_DATA
    crc: int = 0
    encrypted: bool = False
    target: str = ""  # a symbolic link's target

    def locator(self, part: int = 0, status: int | None = None) -> tuple[int, ...]:
        """Where the reader finds this member's bytes in archive number ``part`` of a source."""
        state = self.status if status is None else status
        if self.method == TAR_DATA:
            return (part, self.offset, state)
        return (part, self.offset, state, self.stored, self.method, self.crc)


@dataclass(frozen=True)
class Inner:
    """A member that is itself a tar (a class archive of ImageNet's training tar): its members
    with offsets in the outer archive, or ``error`` when it is no tar."""

    members: tuple[Member, ...]
    notes: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Listing:
    """An archive's members in archive order, and what was odd about it.

    ``size`` and ``mtime_ns`` are the archive file's own, when indexed: a reader refuses an
    archive that changed since. ``inner`` holds the listings of members that are tars
    themselves (top-level ``.tar`` members only), by member name. ``expanded`` is how many
    bytes a ``.tar.gz``'s stream decompresses to (as far as it decompresses), -1 for others.
    """

    path: str
    format: str  # "tar", "tar.gz" or "zip"
    size: int
    mtime_ns: int
    members: tuple[Member, ...]
    notes: tuple[str, ...] = ()
    inner: Mapping[str, Inner] = field(default_factory=dict)
    expanded: int = -1

    @property
    def compressed(self) -> bool:
        """Whether offsets point into the decompressed stream (a ``.tar.gz``), not the file."""
        return self.format == "tar.gz"


def clean_name(name: str) -> str | None:
    """A member name as a clean relative POSIX path (``./a//b/`` -> ``a/b``); ``""`` for the
    archive's root itself; None for a name that climbs out of it (``..``)."""
    parts = [part for part in name.replace("\\", "/").split("/") if part not in ("", ".")]
    if ".." in parts:
        return None
    return "/".join(parts)


def bounded_item(member: Member, max_bytes: int, status: int | None = None) -> tuple[int, int]:
    """The size and status of ``member`` as an item (``status`` given: instead of its own):
    over ``max_bytes`` it is :data:`TOO_LARGE` (unless already skipped for another reason) and
    counts as ``max_bytes + 1`` bytes, so that no claim sizes a plan or a map."""
    state = member.status if status is None else status
    if member.size <= max_bytes:
        return member.size, state
    return max_bytes + 1, state or TOO_LARGE


def unsafe_note(label: str, count: int) -> str:
    """The note on ``count`` members named outside the archive (``..``), ignored; tar and zip alike."""
    return f"{label}: {count} member(s) named outside the archive (with '..') were ignored."


def zip_time_ns(date_time: tuple[int, int, int, int, int, int]) -> int:
    """A zip member's DOS date and time, read as UTC, in nanoseconds (0 if it is no valid date)."""
    try:
        return calendar.timegm((*date_time, 0, 0, 0)) * 1_000_000_000
    except (ValueError, OverflowError):
        return 0
