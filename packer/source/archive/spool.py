"""Decompressed copies of ``.tar.gz`` archives, so that workers read members by byte range.

gzip cannot be read from the middle, so a compressed archive is decompressed once, sequentially,
into a spool file in a node-local directory (``$PACKER_SPOOL_DIR``, default
``<tempdir>/packer-spool-<uid>``), which workers ``pread``. The scan writes it as it streams the
archive for its index (:class:`SpoolWriter`: one decompression for both); where no scan on this node did, the
first process that reads a member makes it (:func:`ensure_spool`) and every other process and
worker on the node waits for it (an exclusive ``flock``). The cost is disk space for the
uncompressed archive: for a huge archive, ``gunzip`` it once and convert the ``.tar``. Members
nobody reads (those over ``max_bytes``) are left as holes, so a small archive that expands to
gigabytes of one member takes no disk. Before writing, the free space is checked against what
will be written (the decompressed size the scan found, less the holes; for an archive not
scanned so, the gzip trailer's size as a first estimate, checked again as the copy grows), so a
full disk is one clear error naming the archive and the space needed, not a half-written spool.

Spools are named by the archive's path, size and modification time (and its holes), written
under a temporary name and renamed into place, so a spool that exists is complete and belongs
to that version of the archive. They do not accumulate: a conversion deletes the spool it made
when it ends (``Source.close()``, :func:`remove_spool`), and making a spool deletes the spools
of older versions of the same archive and any spool unused for :data:`MAX_IDLE_SECONDS` (what a
killed run, or an array task on another node, left behind).
"""

from __future__ import annotations

import bisect
import gzip
import hashlib
import os
import shutil
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from typing import IO, Final

from packer.errors import SourceError
from packer.sizes import format_size
from packer.source.archive.files import ArchiveFile, absolute_location, open_archive_file
from packer.source.archive.gunzip import GzipStream
from packer.source.archive.members import FILE, Listing, Member
from packer.store.filelock import flocked

__all__ = ["MAX_IDLE_SECONDS", "SPOOL_ENV", "SpoolWriter", "ensure_spool", "finish_indexed_spool",
           "remove_spool", "spool_dir", "spool_holes", "spool_path", "spool_while_indexing"]

#: The environment variable naming the spool directory.
SPOOL_ENV: Final = "PACKER_SPOOL_DIR"
#: A spool nobody opened for this long is deleted when another spool is made.
MAX_IDLE_SECONDS: Final = 3 * 24 * 3600
_CHUNK: Final = 1 << 20
_RECHECK: Final = 64 << 20  # an estimate outgrown: free space is checked again for this much more
#: Decompressed byte ranges ``(start, stop)`` left as holes, sorted and apart.
Holes = Sequence[tuple[int, int]]


def spool_dir() -> str:
    """Where spools live: ``$PACKER_SPOOL_DIR``, else a per-user folder of the temp directory."""
    return os.environ.get(SPOOL_ENV) or os.path.join(tempfile.gettempdir(), f"packer-spool-{os.getuid()}")


def _archive_key(path: str) -> str:
    return hashlib.sha256(absolute_location(path).encode("utf-8", "surrogateescape")).hexdigest()[:20]


def _version(size: int, mtime_ns: int) -> str:
    return hashlib.sha256(f"{size}:{mtime_ns}".encode()).hexdigest()[:12]


def spool_path(path: str, size: int, mtime_ns: int, holes: Holes = ()) -> str:
    """The spool of the archive ``path`` as it was (``size`` bytes, modified at ``mtime_ns``),
    with ``holes`` left out: a spool with other holes is another file, never reused for it."""
    extent = "-" + hashlib.sha256(repr(tuple(holes)).encode()).hexdigest()[:8] if holes else ""
    return os.path.join(spool_dir(), f"{_archive_key(path)}-{_version(size, mtime_ns)}{extent}.tar")


def spool_holes(listing: Listing, max_bytes: int) -> tuple[tuple[int, int], ...]:
    """The decompressed ranges of ``listing`` (a ``.tar.gz``'s) nobody reads: the members over
    ``max_bytes`` (those of class tars read as tars, not the class tars themselves)."""
    tars = {name for name, inner in listing.inner.items() if inner.error is None}  # read as tars
    members = [m for m in listing.members if m.name not in tars]
    members += [m for inner in listing.inner.values() for m in inner.members]
    return tuple(sorted({(m.offset, m.offset + m.size) for m in members
                         if m.kind == FILE and m.size > max_bytes}))


class SpoolWriter:
    """A spool being written: decompressed bytes given with their position, written less the
    holes, the free space checked before (for ``needed`` bytes) and again each time the copy
    outgrows what was checked, then renamed into place (:meth:`finish`) or deleted (:meth:`abandon`).

    :func:`ensure_spool` writes one from a stream of its own, and a failure is its error. The
    index writes one as it streams a ``.tar.gz`` anyway (:func:`spool_while_indexing`): ``quiet``,
    it gives up on a failure (no space, no permission) and leaves the reader's :func:`ensure_spool`
    to report it; it learns its holes as the walk reads each header (:meth:`watch`).
    """

    def __init__(self, path: str, size: int, mtime_ns: int, needed: int, *, holes: Holes = (),
                 max_bytes: int | None = None, quiet: bool = False, keep: str = "") -> None:
        self.path, self.size, self.mtime_ns = path, size, mtime_ns
        self.max_bytes, self.quiet = max_bytes, quiet
        self.holes = list(holes)
        self.folder = spool_dir()
        self.temporary = f"{spool_path(path, size, mtime_ns)}.{os.getpid()}.tmp"
        self.written = self.checked = 0
        self.target: IO[bytes] | None = None
        self._guard(self._open, needed, keep)

    def _open(self, needed: int, keep: str) -> None:
        """Make room (other versions' spools, ``keep`` aside), check the space, open the copy."""
        os.makedirs(self.folder, mode=0o700, exist_ok=True)
        _prune(self.folder, _archive_key(self.path), keep=keep)
        self.checked = _check_space(self.path, self.folder, needed)
        self.target = open(self.temporary, "wb")  # noqa: SIM115  # closed by finish/abandon

    def _guard(self, step: Callable[..., None], *args: object) -> None:
        """Run ``step``; on a failure, delete the copy and raise (quietly: stop writing)."""
        try:
            step(*args)
        except (OSError, SourceError):
            self.abandon()
            if not self.quiet:
                raise

    def watch(self, member: Member) -> None:
        """``member``'s header was read: leave its data out if nobody will read it (a ``.tar``
        member too large is written, for it may be a class tar read as one: a spool holding bytes
        nobody reads is still that spool)."""
        if self.max_bytes is not None and member.kind == FILE and member.size > self.max_bytes and \
                not member.name.lower().endswith(".tar"):
            self.holes.append((member.offset, member.offset + member.size))

    def write(self, position: int, chunk: bytes) -> None:
        """Decompressed bytes ``chunk`` at ``position``, less the holes."""
        if self.target is not None and chunk:
            self._guard(self._write, position, chunk)

    def _write(self, position: int, chunk: bytes) -> None:
        assert self.target is not None
        self.written += _write(self.target, chunk, position, self.holes)
        if self.written > self.checked:  # outgrew the estimate: check again before writing on
            self.checked = self.written + _check_space(self.path, self.folder, _RECHECK)

    def finish(self, final: str, length: int) -> None:
        """The copy is whole and ``length`` bytes long (a hole at the end still counts): put it at
        ``final``."""
        if self.target is not None:
            self._guard(self._finish, final, length)

    def _finish(self, final: str, length: int) -> None:
        assert self.target is not None
        self.target.truncate(max(0, length))
        self.target.close()
        self.target = None
        os.replace(self.temporary, final)

    def abandon(self) -> None:
        """Delete the copy (nothing is left of it)."""
        if self.target is not None:
            self.target.close()
            self.target = None
        _unlink(self.temporary)


def spool_while_indexing(archive: ArchiveFile, path: str, max_bytes: int) -> SpoolWriter | None:
    """The quiet writer of the spool of the ``.tar.gz`` ``archive`` (at ``path``) its index makes,
    members over ``max_bytes`` left out (:func:`finish_indexed_spool` puts it into place); None
    when this node has a spool of this version of it already (an earlier run's, kept)."""
    location = absolute_location(path)
    if _spools_of(location, archive.size, archive.mtime_ns):
        return None
    return SpoolWriter(location, archive.size, archive.mtime_ns, _expected(archive), max_bytes=max_bytes,
                       quiet=True)


def finish_indexed_spool(writer: SpoolWriter, listing: Listing) -> None:
    """Put the spool written while ``listing`` was made where :func:`ensure_spool` looks for it:
    named by the holes its reader leaves out (those the writer left out are among them)."""
    assert writer.max_bytes is not None
    holes = spool_holes(listing, writer.max_bytes)
    writer.finish(spool_path(writer.path, writer.size, writer.mtime_ns, holes), listing.expanded)


def ensure_spool(path: str, size: int, mtime_ns: int, *, expanded: int = -1, holes: Holes = ()) -> str:
    """The spool of ``path``, made now (under the node-wide lock) if no process made it yet.

    ``expanded`` is how many bytes the archive decompresses to, as its scan found (-1: not
    known), ``holes`` the decompressed ranges nobody reads, left out. A damaged gzip stream is
    decompressed as far as it goes; the scan already reported where it fails, and members past
    that point are never read.

    Raises:
        SourceError: the spool needs more space than is free, or cannot be written (no space,
            no permission); the message names the archive, the directory, the space needed,
            :data:`SPOOL_ENV` and ``gunzip`` as ways out.
    """
    final = spool_path(path, size, mtime_ns, holes)
    if _touch(final):
        return final
    folder = os.path.dirname(final)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        with flocked(final + ".lock"):
            try:
                if _touch(final):
                    return final
                _decompress(path, size, mtime_ns, final, expanded, holes)
            finally:
                if os.path.exists(final):
                    _unlink(final + ".lock")
    except OSError as err:
        raise SourceError(f"Cannot write the decompressed copy of {path!r} in {folder!r}: "
                          f"{err.strerror or err}. Free space there (it needs the archive's "
                          f"uncompressed size), point {SPOOL_ENV} at a larger local disk, or gunzip "
                          "the archive and convert the .tar.") from err
    return final


def _decompress(path: str, size: int, mtime_ns: int, final: str, expanded: int, holes: Holes) -> None:
    with open_archive_file(path) as archive:
        total = _expected(archive) if expanded < 0 else expanded
        left_out = sum(min(stop, total) - start for start, stop in holes if start < total)
        writer = SpoolWriter(path, size, mtime_ns, max(0, total - left_out), holes=holes, keep=final)
        try:
            stream = GzipStream(archive.stream())
            position = 0
            while True:
                try:
                    chunk = stream.read1(_CHUNK)
                except (EOFError, zlib.error, gzip.BadGzipFile):
                    break  # damaged: keep what decompressed; the scan noted it
                if not chunk:
                    break
                writer.write(position, chunk)
                position += len(chunk)
            writer.finish(final, position)
        finally:
            writer.abandon()


def _expected(archive: ArchiveFile) -> int:
    """A first estimate of an unscanned archive's decompressed size: the last gzip member's
    ISIZE trailer (its size modulo 2**32), or the file's own size if that is more."""
    trailer = archive.pread(4, max(0, archive.size - 4))
    return max(archive.size, int.from_bytes(trailer, "little") if len(trailer) == 4 else 0)


def _check_space(path: str, folder: str, needed: int) -> int:
    """``needed`` when that much is free in ``folder``.

    Raises:
        SourceError: less is free; the message names the archive and the space needed.
    """
    free = shutil.disk_usage(folder).free
    if free < needed:
        raise SourceError(f"Cannot make the decompressed copy of {path!r} in {folder!r}: it needs "
                          f"{format_size(needed)} and {format_size(free)} is free there. Free space "
                          f"there, point {SPOOL_ENV} at a larger local disk, or gunzip the archive and "
                          "convert the .tar.")
    return needed


def _write(target: IO[bytes], chunk: bytes, position: int, holes: Holes) -> int:
    """Write ``chunk``, which belongs at ``position``, except where it falls in ``holes``;
    return how many bytes were written."""
    end, cursor, count = position + len(chunk), position, 0
    first = bisect.bisect_right(holes, (position, position)) - 1
    for start, stop in holes[max(0, first):]:
        if start >= end:
            break
        if stop <= cursor:
            continue
        if start > cursor:
            target.seek(cursor)
            count += target.write(chunk[cursor - position:start - position])
        cursor = min(stop, end)
    if cursor < end:
        target.seek(cursor)
        count += target.write(chunk[cursor - position:])
    return count


def _touch(path: str) -> bool:
    """Mark the spool at ``path`` used now; False when there is none."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    return True


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _prune(folder: str, archive: str, *, keep: str) -> None:
    """Delete spools of other versions of this archive, and spools (or leftovers of writers
    that died) idle too long; a spool still open stays readable to whoever has it open."""
    now = time.time()
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.path == keep or not entry.name.endswith((".tar", ".tmp", ".lock")):
                continue
            try:
                idle = now - entry.stat().st_mtime
            except FileNotFoundError:
                continue
            older_version = entry.name.endswith(".tar") and entry.name.startswith(archive + "-")
            if older_version or idle > MAX_IDLE_SECONDS:  # a .tmp that old: its writer died
                _unlink(entry.path)


def remove_spool(path: str, size: int, mtime_ns: int) -> bool:
    """Delete the spools of ``path`` (that version of it, whatever their holes) on this node;
    True if there was one."""
    found = _spools_of(path, size, mtime_ns)
    for spool in found:
        _unlink(spool)
    return bool(found)


def _spools_of(path: str, size: int, mtime_ns: int) -> list[str]:
    """The spools of that version of ``path`` on this node, whatever their holes."""
    stem = os.path.basename(spool_path(path, size, mtime_ns))[:-len(".tar")]
    try:
        with os.scandir(spool_dir()) as entries:
            return [e.path for e in entries if e.name.endswith(".tar") and
                    (e.name == stem + ".tar" or e.name.startswith(stem + "-"))]
    except FileNotFoundError:
        return []
