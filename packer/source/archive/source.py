"""An archive of an ImageFolder tree as a source, never extracted: ``.tar``, ``.tar.gz``/``.tgz``,
``.zip``, and ImageNet's tar of per-class tars.

Scanning reads member headers only (:mod:`packer.source.archive.tarindex`,
:mod:`packer.source.archive.zipindex`)
and lays them out as the tree extracting the archive would give
(:mod:`packer.source.archive.layout`): same classes, sample order, relative paths and reports as
scanning that tree. An item's identity is its member's size and modification time as the
archive records them (never the archive file's own mtime), so ``packer update`` of an archive
replaced by a newer one with a few members added rewrites only the shards near them. Reading
is one ``pread`` per member (:mod:`packer.source.archive.reader`).

A ``.tar.gz`` is decompressed once: the scan streams it for its index and writes the
decompressed spool copy meanwhile, which every worker reads by range
(:mod:`packer.source.archive.spool`); disk space for the uncompressed archive (less the members
over ``max_bytes``, left as holes). Where the scan did not make it (another node, an index kept
by an earlier run, too little space), the first process on a node that reads a member does.
For a huge archive, ``gunzip`` it first. :meth:`ArchiveSource.close` (called when a conversion
ends) deletes the spool; one a killed run left is reused by the next run of the same archive,
or pruned after some idle days.

Damage is reported, never fatal: see the skip reasons ``truncated``, ``corrupt_member`` (a
``.tar.gz`` failing its gzip check too) and ``too_large`` (over ``max_bytes``, see
:mod:`packer.source.limits`) and the scan's notes. A file that is no archive at all is one
:class:`SourceError` before anything is written.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from packer.errors import SourceError
from packer.source.archive.files import absolute_location, forget_remote_files, open_archive_file
from packer.source.archive.layout import TreeLayout, archive_tree, is_image_name
from packer.source.archive.listings import load_listing, save_listing
from packer.source.archive.members import DIR, FILE, MISSING, NOT_REGULAR, Listing, Member, bounded_item
from packer.source.archive.reader import ArchivePart, ArchiveReader
from packer.source.archive.spool import remove_spool, spool_holes
from packer.source.archive.tarindex import index_tar
from packer.source.archive.tarwalk import Keep
from packer.source.archive.zipindex import index_zip
from packer.source.base import ItemReader, Source, SourceIndex, SourceItem
from packer.source.limits import DEFAULT_MAX_BYTES
from packer.source.registry import ARCHIVE_SUFFIXES

__all__ = ["ArchiveMembers", "ArchiveSource", "archive_format", "index_archive", "is_archive_file",
           "listing_part"]

#: Zip compression methods the reader decompresses: stored, deflated, bzip2.
_ZIP_METHODS = frozenset({0, 8, 12})


def is_archive_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a file named like an archive (``.tar``, ``.tar.gz``, ``.tgz``, ``.zip``)."""
    text = os.fspath(path)
    return text.lower().endswith(ARCHIVE_SUFFIXES) and os.path.isfile(text)


def archive_format(path: str) -> str:
    """``"tar"``, ``"tar.gz"`` or ``"zip"``: from the file's first bytes, else its name."""
    try:
        with open_archive_file(path) as archive:
            magic = archive.pread(4, 0)
    except OSError as err:
        raise SourceError(f"Cannot read the archive {path!r}: {err.strerror or err}.") from None
    if magic[:2] == b"\x1f\x8b":
        return "tar.gz"
    if magic in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    lowered = path.lower()
    if lowered.endswith(".zip"):
        return "zip"
    return "tar.gz" if lowered.endswith((".tar.gz", ".tgz")) else "tar"


def index_archive(path: str, *, keep: Keep | None = None, nested: bool = True,
                  spool_max_bytes: int | None = None) -> tuple[Listing, dict[int, bytes]]:
    """Index the archive at ``path`` from its headers (``keep``, ``nested``, ``spool_max_bytes``:
    see :func:`~packer.source.archive.tarindex.index_tar`; a zip keeps nothing and nests nothing).

    Raises:
        SourceError: it cannot be read, or is no tar, gzip-compressed tar or zip at all.
    """
    fmt = archive_format(path)
    if fmt == "zip":
        return index_zip(path), {}
    return index_tar(path, compressed=fmt == "tar.gz", keep=keep, nested=nested,
                     spool_max_bytes=spool_max_bytes)


def listing_part(listing: Listing, max_bytes: int = DEFAULT_MAX_BYTES) -> ArchivePart:
    """The reader's view of the indexed archive; for a ``.tar.gz``, its decompressed size and
    the ranges of members over ``max_bytes``, which its spool leaves as holes."""
    if not listing.compressed:
        return ArchivePart(absolute_location(listing.path), listing.size, listing.mtime_ns)
    return ArchivePart(absolute_location(listing.path), listing.size, listing.mtime_ns, True,
                       listing.expanded, spool_holes(listing, max_bytes))


def _refuse_unreadable(members: list[Member], path: str) -> None:
    """An encrypted member, or one compressed in a way the reader cannot undo, is an error now."""
    bad = [m for m in members if m.kind == FILE and (m.encrypted or (m.method >= 0 and m.method not in
                                                                       _ZIP_METHODS))]
    if bad:
        what = "is encrypted" if bad[0].encrypted else f"uses compression method {bad[0].method}"
        raise SourceError(f"Member {bad[0].name!r} of {path!r} {what} ({len(bad)} such member(s)): packer "
                          "reads stored, deflated and bzip2 members without a password. Re-create the "
                          "zip (zip -r, or Python's zipfile) or extract it and convert the folder.")


def _remove_spool(listing: Listing | None) -> None:
    if listing is not None and listing.compressed:
        remove_spool(absolute_location(listing.path), listing.size, listing.mtime_ns)


class ArchiveSource(Source):
    """An archive of an ImageFolder tree (see the module docstring)."""

    kind: ClassVar[str] = "archive"
    takes: ClassVar[frozenset[str]] = frozenset({"include_hidden"})
    refuses_empty_classes: ClassVar[bool] = True  # a class folder without images, as ImageFolder

    def __init__(self, location: str, options: Any) -> None:
        super().__init__(location, options)
        self.max_bytes = options.max_bytes
        self.scanned: tuple[Listing, TreeLayout] | None = None
        self.scans: str | None = None
        self.unsaved: Listing | None = None  # an index made here, not kept yet

    def keep_scans_in(self, folder: str) -> None:
        """Keep the archive's index in ``folder`` (:mod:`packer.source.archive.listings`)."""
        self.scans = folder

    def _listing(self) -> Listing:
        """The archive's index: kept by an earlier run over this very archive, or made now."""
        if self.scans is not None:
            with open_archive_file(self.location) as archive:
                size, mtime_ns = archive.size, archive.mtime_ns
            kept = load_listing(self.scans, self.location, size, mtime_ns)
            if kept is not None:
                return kept
        listing, _ = index_archive(self.location, spool_max_bytes=self.max_bytes)
        self.unsaved = listing
        return listing

    def save_scans(self) -> None:
        """Keep the index made by this scan (none kept yet) in the folder given."""
        if self.scans is not None and self.unsaved is not None:
            save_listing(self.scans, self.unsaved)
            self.unsaved = None

    def _scanned(self) -> tuple[Listing, TreeLayout]:
        if self.scanned is None:
            listing = self._listing()
            layout = archive_tree(listing, include_hidden=self.options.include_hidden,
                                  allow_empty=self.options.allow_empty, max_bytes=self.max_bytes)
            _refuse_unreadable([m for m in listing.members if is_image_name(m.name)], self.location)
            self.scanned = listing, layout
        return self.scanned

    def scan(self) -> SourceIndex:
        """Index the archive's headers and lay them out as the extracted tree.

        Raises:
            SourceError: no archive at all, or members the reader cannot decompress.
            EmptySourceError: no class, or a class without images (unless ``allow_empty``).
        """
        return self._scanned()[1].index

    def reader(self) -> ItemReader:
        """Reads members by byte range; ``where`` gives ``archive.tar:cat/x.jpg``."""
        listing, layout = self._scanned()
        return ArchiveReader((listing_part(listing, self.max_bytes),), self.location, prefix=layout.prefix,
                             nested=layout.nested, max_bytes=self.max_bytes)

    def describe(self) -> str:
        """``a tar of 1000 per-class tars``, ``a zip archive of a tree``, ..."""
        listing, layout = self._scanned()
        kind = {"tar": "a tar", "tar.gz": "a gzip-compressed tar", "zip": "a zip archive"}.get(
            listing.format, f"a {listing.format} archive")
        if layout.nested:
            return f"{kind} of {len(layout.index.classes)} per-class tars"
        return f"{kind} of a tree" + (f" (under {layout.prefix[:-1]!r})" if layout.prefix else "")

    def scan_filter(self) -> str:
        """Image members are recognised by their extensions, as in a tree."""
        return "extensions"

    def manifest_extra(self) -> dict[str, Any]:
        """What the manifest records of the archive (``extra.archive``)."""
        listing, layout = self._scanned()
        return {"archive": {"format": listing.format, "layout": "class archives" if layout.nested else "tree",
                            "top_folder": layout.prefix[:-1] or None, "members": len(listing.members)}}

    def close(self) -> None:
        """Delete the decompressed spool this node made of a ``.tar.gz`` (if any); forget what
        this process fetched of an archive behind a URL."""
        _remove_spool(self.scanned[0] if self.scanned is not None else None)
        forget_remote_files()


class ArchiveMembers:
    """An archive as a list file's root (``--root ILSVRC2012_img_val.tar``): files by member
    path, those over ``max_bytes`` ``too_large``."""

    def __init__(self, path: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.listing, _ = index_archive(path, nested=False, spool_max_bytes=max_bytes)
        self.max_bytes = max_bytes
        self.files = {m.name: m for m in self.listing.members if m.kind != DIR}  # the last copy wins

    @property
    def notes(self) -> tuple[str, ...]:
        """What the index found odd about the archive (where it ends early, ...)."""
        return self.listing.notes

    def item(self, relpath: str, label: int) -> SourceItem:
        """The listed path ``relpath`` as an item: the member's identity, or ``missing``.

        Raises:
            SourceError: the member is encrypted or compressed in a way the reader cannot undo.
        """
        member = self.files.get(relpath)
        if member is None:
            return SourceItem(relpath, label, -1, -1, (0, 0, MISSING))
        _refuse_unreadable([member], self.listing.path)
        size, status = bounded_item(member, self.max_bytes, None if member.kind == FILE else NOT_REGULAR)
        return SourceItem(relpath, label, size, member.mtime_ns, member.locator(0, status))

    def reader(self) -> ArchiveReader:
        """Reads the listed members."""
        return ArchiveReader((listing_part(self.listing, self.max_bytes),),
                             os.path.abspath(self.listing.path), max_bytes=self.max_bytes)

    def close(self) -> None:
        """Delete the decompressed spool this node made of a ``.tar.gz`` (if any)."""
        _remove_spool(self.listing)
