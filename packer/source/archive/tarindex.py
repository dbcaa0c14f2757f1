"""Index a tar archive from its member headers in one pass, never reading member data.

An uncompressed ``.tar`` is walked by seeking from header to header (``TarInfo.offset_data`` and
``size`` say where each member's bytes lie), so indexing ImageNet's 138 GB training tar reads
a few hundred MB of headers. A ``.tar.gz`` cannot be seeked: it is streamed once, and offsets
are recorded in the decompressed stream (its reader reads them from a decompressed spool copy,
:mod:`packer.source.archive.spool`).

Top-level ``.tar`` members (also one folder down, for an archive with a top folder) are indexed
too, with absolute offsets: that is how a tar of per-class tars (ImageNet's
``ILSVRC2012_img_train.tar``) is read with one ``pread`` per image. In an uncompressed archive
with at least :data:`PARALLEL_INNER` of them, they are indexed after the outer walk by this
process and a pool (one process per CPU in all, at most 8; header parsing is Python, bound to
one core), each claiming the next share from a shared counter and ``pread``-ing it; the pool's
listings come back as columns (:func:`_as_columns`). The listing is the same, member for member
and note for note. Each tar is walked by :class:`~packer.source.archive.tarwalk.TarWalk`, which
reads plain headers without tarfile (:mod:`packer.source.archive.tarheaders`, a sixth of its
time) and the rest with it.

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

import array
import concurrent.futures as cf
import contextlib
import gc
import itertools
import multiprocessing
import tarfile
import zlib
from collections.abc import Iterator
from typing import IO, Any, Final

from packer.cpus import available_cpus
from packer.errors import SourceError
from packer.source.archive.files import ArchiveFile, open_archive_file
from packer.source.archive.gunzip import GzipStream
from packer.source.archive.members import Inner, Listing, Member
from packer.source.archive.spool import SpoolWriter, finish_indexed_spool, spool_while_indexing
from packer.source.archive.targzip import GzipTail, finish_stream
from packer.source.archive.tarwalk import ArchiveOuter, Keep, TarWalk, index_member_tar

__all__ = ["PARALLEL_INNER", "index_tar"]

#: Member tars from which an uncompressed archive's are indexed by a pool of processes.
PARALLEL_INNER: Final = 64
_MAX_INDEXERS: Final = 8
_BLOCK: Final = tarfile.BLOCKSIZE
_Columns = tuple[int, tuple[Any, ...]]  # members as columns: their count, then each field's column
_Flat = tuple[_Columns, tuple[str, ...], "str | None"]  # members, notes, error


def _as_columns(members: tuple[Member, ...]) -> _Columns:
    """``members`` as columns for a pool's pipe: a field of one value throughout (a tar's kind,
    method, crc...) sent once, integers as one array; a fifth of pickling tuples, both ways."""
    columns: list[Any] = []
    for column in zip(*members, strict=True):
        first = column[0]
        if column.count(first) == len(column) and all(type(value) is type(first) for value in column):
            columns.append(("same", first))
        elif all(type(value) is int for value in column):
            columns.append(("int", array.array("q", column)))
        else:
            columns.append(("each", column))
    return len(members), tuple(columns)


def _from_columns(flat: _Columns) -> tuple[Member, ...]:
    """The members :func:`_as_columns` sent, field for field."""
    count, columns = flat
    fields = [itertools.repeat(values, count) if kind == "same" else values for kind, values in columns]
    return tuple(map(tuple.__new__, itertools.repeat(Member), zip(*fields, strict=True))) if count else ()


_claimed: Any = None  # in a pool's process: the shared count of shares taken (_share_counter)


def _share_counter(claimed: Any) -> None:
    """A pool process's initializer: the shared counter its shares are claimed from."""
    global _claimed
    _claimed = claimed


def _claim(claimed: Any, count: int) -> int | None:
    """The next of ``count`` shares to index, taken from the shared ``claimed`` counter; None when
    every share is taken."""
    with claimed.get_lock():
        index = int(claimed.value)
        if index >= count:
            return None
        claimed.value = index + 1
    return index


def _claim_shares(path: str, size: int, shares: list[list[Member]]) -> list[tuple[int, list[_Flat]]]:
    """A pool process's part: shares of member tars of the uncompressed archive ``path`` (of
    ``size`` bytes), claimed one by one until none are left, each listing's members as columns
    (:func:`_as_columns`), by share number."""
    done: list[tuple[int, list[_Flat]]] = []
    with open_archive_file(path) as archive:
        if archive.size != size:
            raise SourceError(f"The archive {path!r} changed while it was indexed ({size} bytes, then "
                              f"{archive.size}): index it again.")
        outer = ArchiveOuter(archive)
        while (index := _claim(_claimed, len(shares))) is not None:
            found = [index_member_tar(outer, member) for member in shares[index]]  # type: ignore[arg-type]
            done.append((index, [(_as_columns(inner.members), inner.notes, inner.error) for inner in found]))
    return done


def _index_pending(walk: TarWalk, path: str, size: int, pending: list[Member], workers: int) -> list[Inner]:
    """Every pending member tar indexed, in archive order, by this process and ``workers - 1``
    others, each claiming the next share from a shared counter when free. This process indexes
    too: its own shares need no pickling back (sent ones cost it a sixth of their indexing)."""
    share = -(-len(pending) // (8 * workers))  # eight shares a process: the slow ones even out
    shares = [pending[i:i + share] for i in range(0, len(pending), share)]
    found: list[list[Inner]] = [[] for _ in shares]
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                          else "spawn")
    claimed = context.Value("q", 0)
    with cf.ProcessPoolExecutor(workers - 1, mp_context=context, initializer=_share_counter,
                                initargs=(claimed,)) as pool:
        parts = [pool.submit(_claim_shares, path, size, shares) for _ in range(workers - 1)]
        try:
            while (index := _claim(claimed, len(shares))) is not None:
                found[index] = [index_member_tar(walk, member) for member in shares[index]]
            for part in parts:
                for index, flats in part.result():
                    found[index] = [Inner(_from_columns(members), notes, error)
                                    for members, notes, error in flats]
        except BaseException:
            with claimed.get_lock():  # the pool's processes stop after the share in hand
                claimed.value = len(shares)
            raise
    return [inner for part in found for inner in part]


def _indexers(workers: int | None) -> int:
    """Processes to index member tars with: ``workers``, else one per CPU (at most 8)."""
    if multiprocessing.current_process().daemon:
        return 1  # a pool's own worker (Dask's, a DataLoader's) may not start processes
    return max(1, workers if workers is not None else min(available_cpus(), _MAX_INDEXERS))


@contextlib.contextmanager
def _collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while an index grows by a tuple a member (a quarter of
    the walk's time, traversing the list again and again; members hold no cycles), as it was."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _not_a_tar(path: str, err: BaseException, what: str = "tar archive") -> SourceError:
    return SourceError(f"{path!r} is not a valid {what} ({err}): give a .tar, .tar.gz (.tgz) or .zip "
                       "of an ImageFolder tree, re-download it if it is damaged, or name the kind "
                       "of source with source_format=.")


def index_tar(path: str, *, compressed: bool = False, keep: Keep | None = None, nested: bool = True,
              workers: int | None = None, spool_max_bytes: int | None = None
              ) -> tuple[Listing, dict[int, bytes]]:
    """Index the tar (``compressed``: gzip-compressed tar) at ``path`` from its headers.

    ``keep`` says which members' bytes to read too (returned by member position); ``nested``
    indexes top-level ``.tar`` members as tars, with ``workers`` processes where there are
    :data:`PARALLEL_INNER` or more in an uncompressed archive (default: one per CPU, at most 8;
    1 indexes them in this process). ``spool_max_bytes`` given, a compressed tar's spool is
    written as it is decompressed for the index (:class:`~packer.source.archive.spool.SpoolWriter`,
    members over that many bytes left out), so that its reader need not decompress it again.

    Raises:
        SourceError: ``path`` cannot be read, or its start is not a tar (or gzip) archive.
    """
    try:
        with _collection_paused(), open_archive_file(path) as archive:  # a local file unbuffered
            spool = (spool_while_indexing(archive, path, spool_max_bytes)
                     if compressed and spool_max_bytes is not None else None)
            try:
                listing, contents = _index(path, archive, compressed=compressed, keep=keep, nested=nested,
                                           workers=_indexers(workers), spool=spool)
            except BaseException:
                if spool is not None:
                    spool.abandon()
                raise
            if spool is not None:
                finish_indexed_spool(spool, listing)
            return listing, contents
    except OSError as err:
        raise SourceError(f"Cannot read the archive {path!r}: {err.strerror or err}.") from None


def _index(path: str, archive: ArchiveFile, *, compressed: bool, keep: Keep | None,
           nested: bool, workers: int, spool: SpoolWriter | None = None) -> tuple[Listing, dict[int, bytes]]:
    handle = archive.stream()
    tail: GzipTail | None = None
    if compressed:
        tail = GzipTail(GzipStream(handle), None if spool is None else spool.write)
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
        walk = TarWalk(tar, repr(path), 0, lambda: live.delivered, live.block_at, stream=True,
                     failure=lambda: live.failure, keep=keep, inner=inner,
                     watch=None if spool is None else spool.watch)
    else:
        walk = TarWalk(tar, repr(path), 0, lambda: archive.size, lambda at: archive.pread(_BLOCK, at),
                     stream=False, failure=lambda: None, keep=keep, inner=inner, file=archive)
        walk.pending = [] if inner is not None and workers > 1 else None
    walk.run()
    if walk.pending is not None and inner is not None:  # the member tars, by the pool or here
        pending = walk.pending
        found = (_index_pending(walk, path, archive.size, pending, workers) if len(pending) >= PARALLEL_INNER
                 else [index_member_tar(walk, member) for member in pending])
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
