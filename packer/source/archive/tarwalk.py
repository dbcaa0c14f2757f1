"""The walk over one tar's member headers: one :class:`TarWalk` a tar (the archive, or a member
that is a tar), collecting members and noting where and why the tar ends.

Headers are read by :mod:`packer.source.archive.tarheaders` where they are plain (most are,
at a sixth of tarfile's time), by tarfile otherwise; a ``.tar.gz``'s stream by tarfile alone.
See :mod:`packer.source.archive.tarindex` for what a walk records of a damaged archive.
"""

from __future__ import annotations

import decimal
import tarfile
from collections.abc import Callable
from typing import IO, Final

from packer.source.archive.files import ArchiveFile, ByteSlice
from packer.source.archive.members import (
    CORRUPT,
    DIR,
    FILE,
    LINK,
    OK,
    SPECIAL,
    TAR_DATA,
    TRUNCATED,
    Inner,
    Member,
    clean_name,
    unsafe_note,
)
from packer.source.archive.targzip import STREAM_DAMAGE
from packer.source.archive.tarheaders import Plain, PlainHeaders

__all__ = ["DAMAGE", "READ_PLAIN_HEADERS", "ArchiveOuter", "Keep", "TarWalk", "index_member_tar"]

#: Whether plain headers are read without tarfile (:mod:`packer.source.archive.tarheaders`); False
#: reads every header with tarfile, the reference the tests compare the fast reader against.
READ_PLAIN_HEADERS = True
_HARD: Final = "hardlink"  # a hard link's header, before it is resolved to its target's data
_PLAIN_KINDS: Final = {"file": FILE, "dir": DIR, "symlink": LINK, "hardlink": _HARD, "special": SPECIAL}

_BLOCK: Final = tarfile.BLOCKSIZE
_SKIP: Final = 1 << 20  # a stream skips a member's data this much at a time
#: What a damaged archive makes tarfile (or the gzip stream under it) raise.
DAMAGE: Final = (tarfile.TarError, *STREAM_DAMAGE)
_new_member = tuple.__new__
_NS: Final = 1_000_000_000
#: Called with a member's name and size: whether to keep its bytes (WebDataset's small text).
Keep = Callable[[str, int], bool]


def _clean(name: str) -> bool:
    """Whether ``name`` is already what :func:`clean_name` makes of it (most are: checked in C)."""
    return bool(name) and not name.startswith(("/", ".")) and not name.endswith("/") and "\\" not in name \
        and "/." not in name and "//" not in name


def _mtime_ns(info: tarfile.TarInfo) -> int:
    """The member's modification time: exact from a pax header, else whole seconds."""
    text = info.pax_headers.get("mtime")
    if text:
        try:
            return int(decimal.Decimal(text).scaleb(9).to_integral_value())
        except decimal.InvalidOperation:
            pass
    return int(info.mtime) * 1_000_000_000


class TarWalk:
    """One walk over one tar (the archive, or a member that is a tar), collecting members."""

    def __init__(self, tar: tarfile.TarFile, label: str, base: int, limit: Callable[[], float],
                 peek: Callable[[int], bytes], *, stream: bool, failure: Callable[[], BaseException | None],
                 keep: Keep | None = None, inner: dict[str, Inner] | None = None,
                 file: ArchiveFile | None = None, watch: Callable[[Member], None] | None = None) -> None:
        self.tar, self.label, self.base, self.limit, self.peek = tar, label, base, limit, peek
        self.watch = watch  # told of each member as its header is read (before its data)
        self.file = file  # the archive, to read member tars by range (not streamed)
        self.stream, self.failure, self.keep, self.inner = stream, failure, keep, inner
        self.members: list[Member] = []
        self.contents: dict[int, bytes] = {}
        self.notes: list[str] = []
        self.unsafe = 0
        #: Regular files by name, for hard links to find their target: made at the first link.
        self.files: dict[str, Member] | None = None
        #: Member tars left for a pool to index (an uncompressed archive's), or None: inline.
        self.pending: list[Member] | None = None
        self.plain: PlainHeaders | None = None  # plain headers read without tarfile (not from a stream)
        if not stream and file is not None and READ_PLAIN_HEADERS:
            self.plain = PlainHeaders(lambda at, count: file.pread(count, base + at), tar.encoding or "utf-8",
                                      tar.errors)

    def run(self) -> None:
        """Walk the tar: plain headers read by :attr:`plain` where there is one (see
        :mod:`packer.source.archive.tarheaders`), every other member (and the first, which
        tarfile read on opening) by tarfile, from the same position."""
        error: BaseException | None = None
        while True:
            if self.plain is not None and self.tar.firstmember is None and not self.tar.pax_headers:
                self._run_plain(self.plain, int(self.limit()) - self.base)
            try:
                info = self.tar.next()
            except DAMAGE as err:
                error = err
                break
            if info is None:
                break
            self.tar.members.clear()  # type: ignore[attr-defined]  # ours are smaller; it would grow
            try:
                self._take(info)
            except DAMAGE as err:  # reading a kept member or an inner tar's headers ran out
                error = err
                break
        self._finish(error)

    def _take(self, info: tarfile.TarInfo) -> None:
        self._add(info)
        self._skip_data()

    def _run_plain(self, plain: PlainHeaders, limit: int) -> None:
        """Take members while their headers are plain (the tar being ``limit`` bytes long)."""
        tar, members, base, inner = self.tar, self.members, self.base, self.inner
        simple = self.keep is None and self.watch is None  # nothing else to do for a plain file
        while headers := plain.read(tar.offset, limit):
            for header in headers:
                raw, kind, data, size, mtime, _, following = header
                if simple and kind == "file" and _clean(raw) and self.files is None and \
                        (inner is None or raw[-4:].lower() != ".tar"):  # most members: inline
                    members.append(_new_member(Member, (raw, FILE, base + data, size, mtime * _NS, OK, -1,
                                                        TAR_DATA, 0, False, "")))
                    tar.offset = min(following, limit)
                elif not self._take_plain(header, limit):
                    return

    def _take_plain(self, header: Plain, limit: int) -> bool:
        """Add the member of a plain header and move past it; False (nothing done) for a kept
        member whose data runs past the tar's end, which tarfile is to read (and fail on)."""
        raw, kind, data, size, mtime, target, following = header
        if self.keep is not None and kind == "file" and data + size > limit:
            return False  # tarfile fails on reading a kept member's data past the end
        member = self._record(raw, _PLAIN_KINDS[kind], self.base + data, size, mtime * _NS, target)
        if member is not None and member.kind == FILE:
            plain = self.plain
            assert plain is not None
            self._keep_bytes(member, kind == "hardlink", lambda: plain.read_at(data, size))
            self._nested(member)
        self.tar.offset = min(following, limit)
        return True

    def _add(self, info: tarfile.TarInfo) -> None:
        if info.size < 0:  # base-256 sizes can be negative: tarfile would walk backwards
            raise tarfile.HeaderError(f"member {info.name!r} claims {info.size} bytes")
        kind = (DIR if info.isdir() else LINK if info.issym() else _HARD if info.islnk()
                else FILE if info.isreg() and not info.issparse() else SPECIAL)
        member = self._record(info.name, kind, self.base + info.offset_data, info.size, _mtime_ns(info),
                              info.linkname)
        if member is None or member.kind != FILE:
            return
        self._keep_bytes(member, info.islnk(), lambda: self._extracted(info))
        self._nested(member)

    def _extracted(self, info: tarfile.TarInfo) -> bytes | None:
        handle = self.tar.extractfile(info)
        return None if handle is None else handle.read()

    def _keep_bytes(self, member: Member, linked: bool, read: Callable[[], bytes | None]) -> None:
        """Keep the bytes of ``member`` (just added; ``linked``: a hard link, read as its target)
        if the walk keeps them (``read`` gives those of a member that is no link)."""
        if self.keep is None or not self.keep(member.name, member.size):
            return
        kept = self._linked_bytes(member) if linked else read()
        if kept is not None:
            self.contents[len(self.members) - 1] = kept

    def _linked_bytes(self, member: Member) -> bytes | None:
        """The data of a hard link (``member``: its target's location) to keep: read again from
        the archive, or from a stream the bytes kept of its target, else None (read later by
        range, as a member not kept is); tarfile's ``extractfile`` would look the target up
        among the members this walk does not keep, and fail."""
        if not self.stream and self.file is not None:
            return self.file.pread(member.size, member.offset)
        for index in range(len(self.members) - 2, -1, -1):
            if self.members[index].offset == member.offset and index in self.contents:
                return self.contents[index]
        return None

    def _record(self, raw: str, kind: str, offset: int, size: int, mtime: int, target: str) -> Member | None:
        """Add the member a header describes (a hard link as its target's data); None for a name
        outside the archive or the archive's root."""
        name = raw if _clean(raw) else clean_name(raw)
        if name is None:
            self.unsafe += 1
            return None
        if not name:
            return None
        if kind == DIR:
            member = Member(name, DIR, offset, 0, mtime)
        elif kind == LINK:
            member = Member(name, LINK, offset, 0, mtime, target=target)
        elif kind == _HARD:
            if self.files is None:
                self.files = {m.name: m for m in self.members if m.kind == FILE}
            linked = self.files.get(clean_name(target) or "")
            member = (Member(name, SPECIAL, offset, 0, mtime, target=target) if linked is None
                      else linked._replace(name=name, mtime_ns=mtime))
        else:  # namedtuple's own __new__ is Python: a third of the index's time for a tar of thumbnails
            member = _new_member(Member, (name, kind, offset, size, mtime, OK, -1, TAR_DATA, 0, False, ""))
        self.members.append(member)
        if self.watch is not None:
            self.watch(member)
        if member.kind == FILE and self.files is not None:
            self.files[name] = member
        return member

    def _nested(self, member: Member) -> None:
        """Index ``member`` as a tar too, if it is a top-level ``.tar`` of an archive that indexes them."""
        if member.kind == FILE and self.inner is not None and member.name.lower().endswith(".tar") \
                and member.name.count("/") <= 1:
            if self.pending is not None:
                self.pending.append(member)  # indexed after the walk (_index_pending)
            else:
                self.inner[member.name] = index_member_tar(self, member)

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
            self.members[i] = member._replace(status=damaged, size=max(0, int(limit) - member.offset))
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


def index_member_tar(outer: TarWalk, member: Member) -> Inner:
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
    except DAMAGE as err:
        if member.offset + member.size > outer.limit():
            return Inner((), (f"{label} is cut short by the archive's end.",), error="truncated")
        return Inner((), error=f"not a tar archive ({err})")
    walk = TarWalk(tar, label, member.offset, lambda: min(member.offset + member.size, outer.limit()),
                 outer.peek, stream=outer.stream, failure=outer.failure, file=outer.file, watch=outer.watch)
    walk.run()
    return Inner(tuple(walk.members), tuple(walk.notes))


class ArchiveOuter:
    """What :func:`index_member_tar` needs of the walk over an uncompressed archive, in a pool's process:
    the open archive, its size, and ``pread`` for the header a walk stops on."""

    stream = False
    watch = None

    def __init__(self, file: ArchiveFile) -> None:
        self.file = file

    def limit(self) -> float:
        return self.file.size

    def peek(self, at: int) -> bytes:
        return self.file.pread(_BLOCK, at)

    def failure(self) -> BaseException | None:
        return None


