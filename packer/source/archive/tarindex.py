"""Index a tar archive from its member headers in one pass, never reading member data.

An uncompressed ``.tar`` is walked by seeking from header to header (``TarInfo.offset_data`` and
``size`` say where each member's bytes lie), so indexing ImageNet's 138 GB training tar reads
a few hundred MB of headers. A ``.tar.gz`` cannot be seeked: it is streamed once, and offsets
are recorded in the decompressed stream (its reader reads them from a decompressed spool copy,
:mod:`packer.source.archive.spool`).

Top-level ``.tar`` members (also one folder down, for an archive with a top folder) are indexed
too, with absolute offsets: that is how a tar of per-class tars (ImageNet's
``ILSVRC2012_img_train.tar``) is read with one ``pread`` per image. In an uncompressed archive
with at least :data:`PARALLEL_INNER` of them, they are indexed after the outer walk by a pool of
processes (one per CPU, at most 8; tarfile's header parsing is Python, bound to one core), each
``pread``-ing its share; the listing is the same, member for member and note for note.

Damage never loses what comes before it. A member whose data runs past the end of the archive
(a truncated download, or a header claiming more than the archive holds) gets status
``TRUNCATED`` and its size cut to what the archive holds, so no claim sizes a plan; a gzip
stream that cannot be decompressed (bad data) marks the member it was in as ``CORRUPT``; a
gzip member whose CRC-32 or length check fails (:mod:`packer.source.archive.gunzip`) marks every member
its data covers as ``CORRUPT``, which is why a ``.tar.gz`` is decompressed to its very end; a
header that is neither a member nor the end marker stops the walk. Each case adds one note
naming where the archive ends and why.
"""

from __future__ import annotations

import concurrent.futures as cf
import decimal
import multiprocessing
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import replace
from typing import IO, Any, Final

from packer.cpus import available_cpus
from packer.errors import SourceError
from packer.source.archive.files import ArchiveFile, ByteSlice, open_archive_file
from packer.source.archive.gunzip import GzipStream
from packer.source.archive.members import (
    CORRUPT,
    DIR,
    FILE,
    LINK,
    SPECIAL,
    TRUNCATED,
    Inner,
    Listing,
    Member,
    clean_name,
    unsafe_note,
)
from packer.source.archive.targzip import STREAM_DAMAGE, GzipTail, finish_stream

__all__ = ["PARALLEL_INNER", "index_tar"]

#: Member tars from which an uncompressed archive's are indexed by a pool of processes.
PARALLEL_INNER: Final = 64
_MAX_INDEXERS: Final = 8

_BLOCK: Final = tarfile.BLOCKSIZE
_SKIP: Final = 1 << 20  # a stream skips a member's data this much at a time
#: What a damaged archive makes tarfile (or the gzip stream under it) raise.
_DAMAGE: Final = (tarfile.TarError, *STREAM_DAMAGE)
#: Called with a member's name and size: whether to keep its bytes (WebDataset's small text).
Keep = Callable[[str, int], bool]


def _mtime_ns(info: tarfile.TarInfo) -> int:
    """The member's modification time: exact from a pax header, else whole seconds."""
    text = info.pax_headers.get("mtime")
    if text:
        try:
            return int(decimal.Decimal(text).scaleb(9).to_integral_value())
        except decimal.InvalidOperation:
            pass
    return int(info.mtime) * 1_000_000_000


class _Walk:
    """One walk over one tar (the archive, or a member that is a tar), collecting members."""

    def __init__(self, tar: tarfile.TarFile, label: str, base: int, limit: Callable[[], float],
                 peek: Callable[[int], bytes], *, stream: bool, failure: Callable[[], BaseException | None],
                 keep: Keep | None = None, inner: dict[str, Inner] | None = None,
                 file: ArchiveFile | None = None) -> None:
        self.tar, self.label, self.base, self.limit, self.peek = tar, label, base, limit, peek
        self.file = file  # the archive, to read member tars by range (not streamed)
        self.stream, self.failure, self.keep, self.inner = stream, failure, keep, inner
        self.members: list[Member] = []
        self.contents: dict[int, bytes] = {}
        self.notes: list[str] = []
        self.unsafe = 0
        self.files: dict[str, Member] = {}
        #: Member tars left for a pool to index (an uncompressed archive's), or None: inline.
        self.pending: list[Member] | None = None

    def run(self) -> None:
        error: BaseException | None = None
        while True:
            try:
                info = self.tar.next()
            except _DAMAGE as err:
                error = err
                break
            if info is None:
                break
            self.tar.members.clear()  # type: ignore[attr-defined]  # ours are smaller; it would grow
            try:
                self._take(info)
            except _DAMAGE as err:  # reading a kept member or an inner tar's headers ran out
                error = err
                break
        self._finish(error)

    def _take(self, info: tarfile.TarInfo) -> None:
        self._add(info)
        self._skip_data()

    def _add(self, info: tarfile.TarInfo) -> None:
        if info.size < 0:  # base-256 sizes can be negative: tarfile would walk backwards
            raise tarfile.HeaderError(f"member {info.name!r} claims {info.size} bytes")
        name = clean_name(info.name)
        if name is None:
            self.unsafe += 1
            return
        if not name:
            return
        offset, mtime = self.base + info.offset_data, _mtime_ns(info)
        if info.isdir():
            member = Member(name, DIR, offset, 0, mtime)
        elif info.issym():
            member = Member(name, LINK, offset, 0, mtime, target=info.linkname)
        elif info.islnk():
            target = self.files.get(clean_name(info.linkname) or "")
            member = (Member(name, SPECIAL, offset, 0, mtime, target=info.linkname) if target is None
                      else replace(target, name=name, mtime_ns=mtime))
        elif info.isreg() and not info.issparse():
            member = Member(name, FILE, offset, info.size, mtime)
        else:
            member = Member(name, SPECIAL, offset, info.size, mtime)
        self.members.append(member)
        if member.kind != FILE:
            return
        self.files[name] = member
        if self.keep is not None and self.keep(name, info.size):
            handle = self.tar.extractfile(info)
            if handle is not None:
                self.contents[len(self.members) - 1] = handle.read()
        if self.inner is not None and name.lower().endswith(".tar") and name.count("/") <= 1:
            if self.pending is not None:
                self.pending.append(member)  # indexed after the walk (_index_pending)
            else:
                self.inner[name] = _inner(self, member)

    def _skip_data(self) -> None:
        """Move past the member just taken, never past the archive's end: tarfile seeks a file
        (and a claimed size of 2**63 bytes overflows the seek) and reads a stream 10 KiB at a
        time until it is there, even after the stream ended (for 2**62 bytes, for ever)."""
        if not self.stream:
            self.tar.offset = min(self.tar.offset, int(self.limit()) - self.base)
            return
        stream = self.tar.fileobj
        while (left := self.tar.offset - stream.tell()) > 0:
            if not stream.read(min(left, _SKIP)):
                self.tar.offset = stream.tell()
                return

    def _finish(self, error: BaseException | None) -> None:
        limit = self.limit()
        failure = self.failure()
        damaged = CORRUPT if failure is not None and not isinstance(failure, EOFError) else TRUNCATED
        cut = [i for i, m in enumerate(self.members) if m.kind == FILE and m.offset + m.size > limit]
        for i in cut:  # sized by what the archive holds, not by what the header claims
            member = self.members[i]
            self.members[i] = replace(member, status=damaged, size=max(0, int(limit) - member.offset))
        if self.unsafe:
            self.notes.append(unsafe_note(self.label, self.unsafe))
        last = f" after member {self.members[-1].name!r}" if self.members else ""
        if cut:
            names = ", ".join(repr(self.members[i].name) for i in cut[:3])
            what = "is cut short" if damaged == TRUNCATED else "has damaged compressed data"
            where = f"byte {int(limit)}" + (" of its decompressed data" if self.stream else "")
            self.notes.append(f"{self.label} {what} at {where}: member(s) {names} "
                              f"{'end past it' if damaged == TRUNCATED else 'lie in it'} (skipped as "
                              f"{'truncated' if damaged == TRUNCATED else 'corrupt_member'}); members "
                              "after that point are missing.")
        elif failure is not None or error is not None:
            self.notes.append(f"{self.label} ends early{last} ({failure or error}): members after "
                              "that point are missing.")
        else:
            self._check_end(last)

    def _check_end(self, last: str) -> None:
        """The walk stopped on a header: the end marker (fine), the file's end, or damage."""
        position = self.base + self.tar.offset
        block = self.peek(position) if position < self.limit() else b""
        if len(block) == _BLOCK and not block.strip(b"\0"):
            return
        if not block:
            self.notes.append(f"{self.label} has no end-of-archive marker{last}: it may have been cut "
                              "at a member boundary, so members may be missing.")
        else:
            self.notes.append(f"{self.label} has a damaged member header at byte {position}{last}: "
                              "members after that point are missing.")


def _inner(outer: _Walk, member: Member) -> Inner:
    """Index the members of ``member``, a top-level member of the archive ``outer`` walks that
    is a tar itself (offsets in the archive are absolute: ``outer`` starts at 0)."""
    label = f"class archive {member.name!r}"
    if outer.stream:
        stream = outer.tar.fileobj  # tarfile's forward-only stream: read on from where it is

        def read_at(position: int, count: int) -> bytes:
            if stream.tell() != position:
                stream.seek(position)
            return stream.read(count)
    else:
        archive = outer.file
        assert archive is not None  # an uncompressed archive's walk holds it

        def read_at(position: int, count: int) -> bytes:
            return archive.pread(count, position)
    handle: IO[bytes] = ByteSlice(read_at, member.offset, member.size)  # type: ignore[assignment]
    try:
        tar = tarfile.open(fileobj=handle, mode="r|" if outer.stream else "r:")
    except _DAMAGE as err:
        if member.offset + member.size > outer.limit():
            return Inner((), (f"{label} is cut short by the archive's end.",), error="truncated")
        return Inner((), error=f"not a tar archive ({err})")
    walk = _Walk(tar, label, member.offset, lambda: min(member.offset + member.size, outer.limit()),
                 outer.peek, stream=outer.stream, failure=outer.failure, file=outer.file)
    walk.run()
    return Inner(tuple(walk.members), tuple(walk.notes))


class _FileOuter:
    """What :func:`_inner` needs of the walk over an uncompressed archive, in a pool's process:
    the open archive, its size, and ``pread`` for the header a walk stops on."""

    stream = False

    def __init__(self, file: ArchiveFile) -> None:
        self.file = file

    def limit(self) -> float:
        return self.file.size

    def peek(self, at: int) -> bytes:
        return self.file.pread(_BLOCK, at)

    def failure(self) -> BaseException | None:
        return None


_Flat = tuple[list[tuple[Any, ...]], tuple[str, ...], "str | None"]  # members, notes, error


def _inner_share(path: str, size: int, members: list[Member]) -> list[_Flat]:
    """Index ``members`` (member tars of the uncompressed archive ``path`` of ``size`` bytes):
    one pool process's share, each listing's members as plain tuples (a third of the pickling)."""
    with open_archive_file(path) as archive:
        if archive.size != size:
            raise SourceError(f"The archive {path!r} changed while it was indexed ({size} bytes, then "
                              f"{archive.size}): index it again.")
        outer = _FileOuter(archive)
        found = [_inner(outer, member) for member in members]  # type: ignore[arg-type]
    return [([(m.name, m.kind, m.offset, m.size, m.mtime_ns, m.status, m.stored, m.method, m.crc, m.encrypted,
               m.target) for m in inner.members], inner.notes, inner.error) for inner in found]


def _index_pending(path: str, size: int, pending: list[Member], workers: int) -> list[Inner]:
    """Every pending member tar indexed by ``workers`` processes, in archive order."""
    share = -(-len(pending) // (4 * workers))  # four shares a process: the slow ones even out
    shares = [pending[i:i + share] for i in range(0, len(pending), share)]
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method)) as pool:
        return [Inner(tuple(Member(*fields) for fields in members), notes, error)
                for done in pool.map(_inner_share, [path] * len(shares), [size] * len(shares), shares)
                for members, notes, error in done]


def _indexers(workers: int | None) -> int:
    """Processes to index member tars with: ``workers``, else one per CPU (at most 8)."""
    if multiprocessing.current_process().daemon:
        return 1  # a pool's own worker (Dask's, a DataLoader's) may not start processes
    return max(1, workers if workers is not None else min(available_cpus(), _MAX_INDEXERS))


def _not_a_tar(path: str, err: BaseException, what: str = "tar archive") -> SourceError:
    return SourceError(f"{path!r} is not a valid {what} ({err}): give a .tar, .tar.gz (.tgz) or .zip "
                       "of an ImageFolder tree, re-download it if it is damaged, or name the kind "
                       "of source with source_format=.")


def index_tar(path: str, *, compressed: bool = False, keep: Keep | None = None,
              nested: bool = True, workers: int | None = None) -> tuple[Listing, dict[int, bytes]]:
    """Index the tar (``compressed``: gzip-compressed tar) at ``path`` from its headers.

    ``keep`` says which members' bytes to read too (returned by member position); ``nested``
    indexes top-level ``.tar`` members as tars, with ``workers`` processes where there are
    :data:`PARALLEL_INNER` or more in an uncompressed archive (default: one per CPU, at most 8;
    1 indexes them in this process).

    Raises:
        SourceError: ``path`` cannot be read, or its start is not a tar (or gzip) archive.
    """
    try:
        with open_archive_file(path) as archive:  # a local file unbuffered: a header costs 512 bytes
            return _index(path, archive, compressed=compressed, keep=keep, nested=nested,
                          workers=_indexers(workers))
    except OSError as err:
        raise SourceError(f"Cannot read the archive {path!r}: {err.strerror or err}.") from None


def _index(path: str, archive: ArchiveFile, *, compressed: bool, keep: Keep | None,
           nested: bool, workers: int) -> tuple[Listing, dict[int, bytes]]:
    handle = archive.stream()
    tail: GzipTail | None = None
    if compressed:
        tail = GzipTail(GzipStream(handle))
        source: IO[bytes] = tail  # type: ignore[assignment]  # read() is all tarfile needs
    else:
        source = handle
    try:
        tar = tarfile.open(fileobj=source, mode="r|" if compressed else "r:")
    except tarfile.ReadError as err:
        if tail is not None and tail.failure is not None:
            raise _not_a_tar(path, tail.failure, "gzip-compressed tar archive") from None
        raise _not_a_tar(path, err, "gzip-compressed tar archive" if compressed else "tar archive") from None
    except (EOFError, zlib.error, OSError) as err:
        raise _not_a_tar(path, err, "gzip-compressed tar archive") from None
    inner: dict[str, Inner] | None = {} if nested else None
    if tail is not None:
        live = tail
        walk = _Walk(tar, repr(path), 0, lambda: live.delivered, live.block_at, stream=True,
                     failure=lambda: live.failure, keep=keep, inner=inner)
    else:
        walk = _Walk(tar, repr(path), 0, lambda: archive.size, lambda at: archive.pread(_BLOCK, at),
                     stream=False, failure=lambda: None, keep=keep, inner=inner, file=archive)
        walk.pending = [] if inner is not None and workers > 1 else None
    walk.run()
    if walk.pending is not None and inner is not None:  # the member tars, by the pool or here
        pending = walk.pending
        found = (_index_pending(path, archive.size, pending, workers) if len(pending) >= PARALLEL_INNER
                 else [_inner(walk, member) for member in pending])
        inner.update((member.name, listing) for member, listing in zip(pending, found, strict=True))
    notes = list(walk.notes)
    for nested_listing in (inner or {}).values():
        notes.extend(nested_listing.notes)
    members, expanded = tuple(walk.members), -1
    if tail is not None:
        members, inner, notes = finish_stream(path, tail, members, inner or {}, notes)
        expanded = tail.delivered
    listing = Listing(path, "tar.gz" if compressed else "tar", archive.size, archive.mtime_ns,
                      members, tuple(notes), inner or {}, expanded)
    return listing, walk.contents
