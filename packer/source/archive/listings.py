"""An archive's index kept beside a conversion's plan, so that array tasks, resumes and merges
do not index it again (ImageNet's training tar: 18-30 s on 2 cores; a tar behind a URL: every
block of it fetched once more).

A listing is saved as gzip-compressed JSON named by the archive's location, size and
modification time (:func:`listing_name`), in a folder the conversion gives
(:meth:`packer.source.base.Source.keep_scans_in`: ``DST/.packer-scans``, removed with the plan
once the dataset is complete). It is trusted no more than the archive: a file of another
version, damaged, or holding a member name that is not clean (``..``, absolute, a backslash),
a negative number or a range past the archive's end is ignored and the archive indexed again.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from typing import Any, Final

from packer.source.archive.members import (
    DIR,
    FILE,
    LINK,
    OK,
    SPECIAL,
    TAR_DATA,
    Inner,
    Listing,
    Member,
    clean_name,
)
from packer.store.durable import atomic_write_bytes

__all__ = ["load_listing", "save_listing"]

_VERSION: Final = 1
_KINDS: Final = frozenset({FILE, DIR, LINK, SPECIAL})
_FIELDS: Final = ("name", "kind", "offset", "size", "mtime_ns", "status", "stored", "method", "crc",
                  "encrypted", "target")


def listing_name(location: str, size: int, mtime_ns: int) -> str:
    """The file name of the listing of the archive ``location`` as it is (size, mtime)."""
    key = hashlib.sha256(f"{location}\0{size}\0{mtime_ns}".encode("utf-8", "surrogateescape")).hexdigest()
    return f"listing-{key[:24]}.json.gz"


def _rows(members: tuple[Member, ...]) -> list[list[Any]]:
    return [[getattr(m, name) for name in _FIELDS] for m in members]


def save_listing(folder: str, listing: Listing) -> None:
    """Keep ``listing`` in ``folder`` (atomically; a failure to write is no error: the next run
    indexes again)."""
    record = {"version": _VERSION, "path": listing.path, "format": listing.format, "size": listing.size,
              "mtime_ns": listing.mtime_ns, "expanded": listing.expanded, "notes": list(listing.notes),
              "members": _rows(listing.members),
              "inner": {name: {"members": _rows(inner.members), "notes": list(inner.notes),
                               "error": inner.error} for name, inner in listing.inner.items()}}
    data = gzip.compress(json.dumps(record, separators=(",", ":")).encode("utf-8", "surrogateescape"),
                         compresslevel=1, mtime=0)
    try:
        os.makedirs(folder, exist_ok=True)
        atomic_write_bytes(os.path.join(folder, listing_name(listing.path, listing.size, listing.mtime_ns)),
                           data)
    except OSError:
        return


def load_listing(folder: str, location: str, size: int, mtime_ns: int) -> Listing | None:
    """The listing kept in ``folder`` of the archive ``location`` as it is now, or None (none
    kept, of another version of it, or not to be trusted: see the module docstring)."""
    path = os.path.join(folder, listing_name(location, size, mtime_ns))
    try:
        with open(path, "rb") as handle:
            record = json.loads(gzip.decompress(handle.read()).decode("utf-8", "surrogateescape"))
        if (record["version"], record["path"], record["size"], record["mtime_ns"]) != \
                (_VERSION, location, size, mtime_ns):
            return None
        bound = record["expanded"] if record["format"] == "tar.gz" else size
        members = _members(record["members"], bound)
        inner = {str(name): Inner(_members(value["members"], bound), tuple(map(str, value["notes"])),
                                  None if value["error"] is None else str(value["error"]))
                 for name, value in record["inner"].items()}
        if members is None or any(value.members is None for value in inner.values()):
            return None
        return Listing(location, str(record["format"]), size, mtime_ns, members,
                       tuple(map(str, record["notes"])), inner, int(record["expanded"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError, zlib.error, gzip.BadGzipFile):
        return None


def _members(rows: list[list[Any]], bound: int) -> tuple[Member, ...] | None:
    """The members of ``rows``, or None when one is not what an index of the archive gives."""
    members = []
    for row in rows:
        member = Member(*row)
        numbers = (member.offset, member.size, member.status, member.crc)
        if (not isinstance(member.name, str) or not member.name or clean_name(member.name) != member.name
                or "\\" in member.name or member.kind not in _KINDS or not isinstance(member.target, str)
                or not all(isinstance(n, int) and n >= 0 for n in numbers)
                or not isinstance(member.method, int) or not isinstance(member.stored, int)):
            return None
        extent = member.size if member.method == TAR_DATA else member.stored
        if bound >= 0 and member.status == OK and member.kind == FILE and member.offset + extent > bound:
            return None  # a member the archive cannot hold (a truncated one has its own status)
        members.append(member)
    return tuple(members)
