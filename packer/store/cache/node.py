"""The node cache: one bounded directory of remote bytes, shared by every process on a node.

Every DataLoader worker, DDP rank and job on a node that reads remote datasets shares one cache
directory (:func:`default_cache_dir`). An entry is named by a content key the caller chooses
(``"3f2a9c0b7d1e4a65/b/000123"``, ``"3f2a9c0b7d1e4a65.lmdb"``): a key names immutable bytes, so an
entry is complete or absent, never stale. Layout (``v1`` lets a later layout live beside it)::

    <dir>/v1/entries/<key>      complete entries (a key's "/" are folders); mtime = last use
    <dir>/v1/tmp/<h>.<size>.<ns>.<pid>.<rand>
                                downloads in flight, renamed into entries/ once whole and checked;
                                one whose owner died (same pid namespace ``ns``) or that saw no
                                write for an hour is removed by eviction and clear
    <dir>/v1/locks/key-<hhhh>   flock held while a key is fetched: one download per key per node.
                                65536 buckets of the key's sha1 keep lock files few; two keys of
                                one bucket merely download one after the other
    <dir>/v1/usage              "<bytes> <reservations since the last scan>": entries plus
                                downloads in flight; read and written under its own flock

Bound: a download first reserves its size in ``usage``. When the reservation would cross ``limit``,
or leave less than ``min_free`` free on the file system, or after 4096 reservations, the writer
scans the directory and unlinks least recently used entries down to 90% of ``limit`` (the slack
keeps a full cache from rescanning on every miss). Downloads in flight count, so several
processes filling the cache together stay under the bound. An entry larger than ``limit`` alone is
still written (everything else is evicted for it); it goes when the next entry needs room.

Unlinking never breaks a reader that holds an entry open. A path from :meth:`NodeCache.lookup`
may vanish before it is opened: the caller then calls :meth:`NodeCache.fetch` again.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO, Final

from packer.errors import CacheError, IntegrityError
from packer.sizes import format_size, parse_size
from packer.store.cache import files
from packer.store.cache.bound import LastBound, read_last_bound, record_bound
from packer.store.filelock import flocked, try_flocked

__all__ = ["DEFAULT_MIN_FREE", "CacheInfo", "NodeCache", "default_cache_dir", "user_cache_folder"]

log = logging.getLogger(__name__)

DEFAULT_MIN_FREE: Final = 1 << 30  # free-space floor on the cache's file system, bytes

_LAYOUT: Final = "v1"
_KEY: Final = re.compile(r"[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*")
_RESCAN_EVERY: Final = 4096  # reservations between scans that correct the usage count
_SLACK: Final = 0.1  # eviction frees this fraction of the limit (and of the floor) beyond the need

_ADVICE: Final = ("pass a smaller cache_limit=, point PACKER_CACHE at a directory on a bigger disk, "
                  "or run `packer cache clear`")


def user_cache_folder(name: str, variable: str) -> str:
    """$``variable`` if set, else $XDG_CACHE_HOME/``name``, else ~/.cache/``name``: where packer
    keeps a kind of per-user data on this machine."""
    explicit = os.environ.get(variable)
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return os.path.abspath(os.path.join(os.path.expanduser(base), name))


def default_cache_dir() -> str:
    """$PACKER_CACHE if set, else $XDG_CACHE_HOME/packer, else ~/.cache/packer."""
    return user_cache_folder("packer", "PACKER_CACHE")


@dataclass(frozen=True)
class CacheInfo:
    """What a node cache holds, as :meth:`NodeCache.info` found it."""

    directory: str
    entries: int
    num_bytes: int
    limit: int | None
    free_bytes: int  # statvfs free space of the cache's file system
    oldest: float | None  # last-use time (epoch seconds) of the least recently used entry
    #: The bound the last reading process set (a bound is per process, not the directory's).
    last_bound: LastBound | None = None


class NodeCache:
    """A bounded, least-recently-used cache of immutable remote bytes, shared on a node.

    Args:
        directory: the cache directory; :func:`default_cache_dir` when None. Created on first write.
        limit: most bytes of entries, as a number or a size text (``"50GB"``); None: only the floor.
        min_free: bytes to keep free on the cache's file system; None or 0: no floor.

    The object holds three values and no file or lock between calls, so it pickles small and is
    safe across ``fork``. Several objects on one directory, in any processes, cooperate.
    """

    __slots__ = ("directory", "limit", "min_free")

    def __init__(self, directory: str | os.PathLike[str] | None = None, *,
                 limit: int | str | None = None, min_free: int | str | None = DEFAULT_MIN_FREE) -> None:
        self.directory: str = (default_cache_dir() if directory is None
                               else os.path.abspath(os.path.expanduser(os.fspath(directory))))
        self.limit: int | None = None if limit is None else parse_size(limit)
        self.min_free: int = 0 if min_free is None or min_free == 0 else parse_size(min_free)

    def __repr__(self) -> str:
        return f"NodeCache({self.directory!r}, limit={self.limit}, min_free={self.min_free})"

    def lookup(self, key: str) -> str | None:
        """Path of the complete entry `key`, marking it used; None when not cached.

        Eviction may remove the file before the caller opens it: on FileNotFoundError, call
        :meth:`fetch`. An open entry stays readable whatever is evicted.
        """
        path = self._entry(key)
        return path if files.touch(path) is not None else None

    def fetch(self, key: str, size: int, download: Callable[[BinaryIO], None], *,
              check: Callable[[str], None] | None = None) -> str:
        """Path of the complete entry `key` (exactly `size` bytes), downloading it at most once
        per node however many processes ask at the same time.

        `download` writes the whole object into the file it is given; it may be called a second time
        (after the disk filled up) and must not fetch from this cache. `check` gets the finished
        temp file's path; whatever it raises propagates, and the temp file is deleted. Another
        process may evict the entry before the path is opened: then fetch again.

        Raises:
            IntegrityError: `download` wrote another number of bytes than `size` (retry).
            CacheError: the file system cannot keep `min_free` free even with the cache empty.
            ValueError: `key` is malformed, or names a folder of another key.
        """
        path = self._entry(key)
        if size < 0:
            raise ValueError(f"cache entry size must be 0 or more, not {size}")
        found = files.touch(path)
        if found is not None and found.st_size == size:
            return path
        self._ready()
        with flocked(self._lock_path(key)):
            found = files.touch(path)  # another process may have fetched it while we waited
            if found is not None:
                if found.st_size == size:
                    return path
                log.warning("cache entry %s holds %d bytes, not %d: fetching it again",
                            path, found.st_size, size)
            self._store(key, size, download, check)
        return path

    def fetch_run(self, keys: Sequence[str], sizes: Sequence[int],
                  download: Callable[[int], Sequence[memoryview]]) -> list[str | memoryview]:
        """Entries for a prefix of ``keys`` (consecutive pieces of one object, ``sizes`` bytes
        each) in one ``download(n)``, which returns the bytes of the first ``n``.

        The first key's lock is waited for; the next keys are claimed while their locks are
        free and they are not cached, so processes whose runs overlap split them instead of
        fetching the overlap twice. Returns the bytes fetched for each key of the prefix; or,
        where another process fetched the first key meanwhile, its cached path alone. The
        caller fetches the rest (a later call waits for whoever holds it, then finds it).

        Raises:
            IntegrityError: ``download`` returned another number of pieces or bytes than asked.
            CacheError, ValueError: as :meth:`fetch`.
        """
        first = self._entry(keys[0])
        if files.touch(first) is not None:
            return [first]
        self._ready()
        with contextlib.ExitStack() as held, flocked(self._lock_path(keys[0])):
            if files.touch(first) is not None:
                return [first]
            buckets = {self._lock_path(keys[0])}
            count = 1
            for key in keys[1:]:
                bucket = self._lock_path(key)
                if files.touch(self._entry(key)) is not None or (
                        bucket not in buckets and not try_flocked(bucket, held)):
                    break
                buckets.add(bucket)
                count += 1
            pieces = list(download(count))
            if len(pieces) != count:
                raise IntegrityError(f"a run download gave {len(pieces)} pieces, {count} asked")
            for key, size, piece in zip(keys[:count], sizes, pieces, strict=False):
                self._store(key, size, lambda out, piece=piece: out.write(piece))
            return list(pieces)

    def evict_to(self, target_bytes: int) -> int:
        """Remove least recently used entries until the cache holds at most `target_bytes` (entries
        and downloads in flight); return the bytes freed. Open entries stay readable."""
        if not os.path.isdir(self._path()):
            return 0
        with self._usage() as fd:
            return self._evict(fd, lambda _, held: held <= target_bytes)[1]

    def info(self) -> CacheInfo:
        """Entries, bytes, limit, free space and the oldest last use, from a scan (no lock, no change)."""
        entries = files.scan_entries(self._path("entries"))
        return CacheInfo(self.directory, len(entries), sum(entry[1] for entry in entries), self.limit,
                         self._free(), entries[0][0] if entries else None, read_last_bound(self._path()))

    def clear(self, *, older_than: float | None = None) -> tuple[int, int]:
        """Remove entries (all, or those unused for `older_than` seconds); return (entries, bytes)
        removed. Abandoned downloads go too; downloads in flight and lock files stay."""
        if not os.path.isdir(self._path()):
            return 0, 0
        cutoff = float("inf") if older_than is None else time.time() - older_than
        with self._usage() as fd:
            return self._evict(fd, lambda last_use, _: last_use >= cutoff)[:2]

    # -- writing an entry -------------------------------------------------------------------------

    def _ready(self) -> None:
        """The cache's folders exist and its bound is recorded, before a download."""
        for part in ("entries", "tmp", "locks"):
            os.makedirs(self._path(part), exist_ok=True)
        record_bound(self._path(), self.limit, self.min_free)

    def _store(self, key: str, size: int, download: Callable[[BinaryIO], None],
               check: Callable[[str], None] | None = None) -> None:
        """Download ``key`` into a temp file, ``check`` it and move it into place, under its lock;
        a failure deletes the temp file and releases its reservation."""
        tmp = self._download(key, size, download)
        try:
            if check is not None:
                check(tmp)
            self._publish(key, tmp, self._entry(key))
        except BaseException:
            self._discard(tmp, size)
            raise

    def _download(self, key: str, size: int, download: Callable[[BinaryIO], None]) -> str:
        """A temp file holding `download`'s `size` bytes; a full disk is evicted and retried once."""
        for squeeze in (False, True):
            tmp, fd = self._reserve(key, size, squeeze=squeeze)
            try:
                with os.fdopen(fd, "wb") as out:
                    download(out)
                break
            except BaseException as exc:
                self._discard(tmp, size)
                if not (isinstance(exc, OSError) and exc.errno == errno.ENOSPC):
                    raise
                if squeeze:
                    raise CacheError(f"the node cache {self.directory} ran out of disk "
                                     f"space fetching {key!r} ({format_size(size)}) even after evicting: "
                                     f"{_ADVICE}") from exc
                log.debug("disk full fetching %s into %s: evicting and retrying", key, self.directory)
        written = os.path.getsize(tmp)
        if written != size:
            self._discard(tmp, size)
            raise IntegrityError(f"cache entry {key!r}: the download wrote {written} bytes, "
                                 f"{size} expected; fetch it again")
        return tmp

    def _reserve(self, key: str, size: int, *, squeeze: bool) -> tuple[str, int]:
        """Make room for `size` bytes, then create the temp file (path, open fd) that holds them."""
        with self._usage() as fd:
            usage, since = files.read_usage(fd)
            if (squeeze or usage is None or since >= _RESCAN_EVERY
                    or (self.limit is not None and usage + size > self.limit)
                    or self._free() - size < self.min_free):
                usage, since = self._make_room(fd, size, squeeze=squeeze), 0
            name = f"{files.sha1(key)[:16]}.{size}.{files.namespace()}.{os.getpid()}.{secrets.token_hex(4)}"
            tmp = self._path("tmp", name)
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            files.write_usage(fd, usage + size, since + 1)
        return tmp, out

    def _make_room(self, fd: int, size: int, *, squeeze: bool) -> int:
        """Evict for `size` more bytes under the limit and above the floor (usage lock `fd` held);
        return the bytes then held. `squeeze` (after a full disk) also halves what is held."""
        goal = None if self.limit is None else self.limit - size - int(self.limit * _SLACK)
        if squeeze:
            half = files.read_usage(fd)[0] or 0
            goal = half // 2 if goal is None else min(goal, half // 2)
        floor = self.min_free + size
        enough = floor + int(self.min_free * _SLACK)
        held = self._evict(fd, lambda _, held: (goal is None or held <= goal) and self._free() >= enough)[2]
        free = self._free()
        if free < floor:
            raise CacheError(f"the node cache {self.directory} cannot keep {format_size(self.min_free)} "
                             f"free for {format_size(size)} more: {format_size(free)} free with the "
                             f"cache empty; {_ADVICE}")
        return held

    def _evict(self, fd: int, stop: Callable[[float, int], bool]) -> tuple[int, int, int]:
        """Unlink least recently used entries until `stop(next entry's last use, bytes held)`;
        return (entries, bytes) removed and the bytes held. Usage lock `fd` held; it records them.
        Abandoned downloads are removed; downloads in flight count as held."""
        inflight = files.sweep_temps(self._path("tmp"))  # first: a download renamed during the scans
        entries = files.scan_entries(self._path("entries"))  # then counts twice, never zero times
        held = sum(entry[1] for entry in entries) + inflight
        count = freed = 0
        for last_use, nbytes, path in entries:
            if stop(last_use, held):
                break
            held -= nbytes
            if self._remove(path):
                count, freed = count + 1, freed + nbytes
        files.write_usage(fd, held, 0)
        if count:
            log.debug("evicted %d entries (%s) from %s: %s held", count, format_size(freed),
                      self.directory, format_size(held))
        return count, freed, held

    def _publish(self, key: str, tmp: str, path: str) -> None:
        """Rename the finished temp file into place (an eviction may remove a folder meanwhile)."""
        for attempt in range(3):
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.replace(tmp, path)
                return
            except FileNotFoundError:
                if attempt == 2 or not os.path.exists(tmp):
                    raise CacheError(f"could not move the download of {key!r} from {tmp} into "
                                     f"{self.directory}: it was removed; fetch it again") from None
            except (FileExistsError, NotADirectoryError, IsADirectoryError) as exc:
                # makedirs races an eviction pruning the same folder (mkdir saw it, isdir did
                # not): try again; only a file where the folder should be is a real clash
                if attempt < 2 and not (os.path.isfile(os.path.dirname(path)) or os.path.isdir(path)):
                    continue
                raise ValueError(f"cache key {key!r} clashes with another key in {self.directory}: "
                                 "one names the other's folder") from exc

    def _discard(self, tmp: str, size: int) -> None:
        """Delete an unfinished temp file and release its reservation."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        with self._usage() as fd:
            usage, since = files.read_usage(fd)
            if usage is not None:
                files.write_usage(fd, usage - size, since)

    # -- the directory ----------------------------------------------------------------------------

    def _lock_path(self, key: str) -> str:
        """The lock file of ``key``'s bucket (a 65536th of all keys)."""
        return self._path("locks", "key-" + files.sha1(key)[:4])

    def _path(self, *parts: str) -> str:
        return os.path.join(self.directory, _LAYOUT, *parts)

    def _entry(self, key: str) -> str:
        """The path of `key`'s entry; ValueError for a malformed key."""
        if not isinstance(key, str) or not _KEY.fullmatch(key) or any(
                part in (".", "..") for part in key.split("/")):
            raise ValueError(f"invalid cache key {key!r}: use names of A-Z a-z 0-9 . _ - joined by "
                             "'/', without '.' or '..' parts")
        return self._path("entries", key)

    @contextlib.contextmanager
    def _usage(self) -> Iterator[int]:
        """The usage file's fd, flocked; the folders are created first."""
        os.makedirs(self._path("locks"), exist_ok=True)
        with flocked(self._path("usage")) as fd:
            yield fd

    def _remove(self, path: str) -> bool:
        """Unlink an entry and the folders it leaves empty; False when it was already gone."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        root, parent = self._path("entries"), os.path.dirname(path)
        while parent != root and len(parent) > len(root):
            try:
                os.rmdir(parent)
            except OSError:  # not empty, or gone
                break
            parent = os.path.dirname(parent)
        return True

    def _free(self) -> int:
        """Bytes free (for unprivileged users) on the cache's file system."""
        path = self.directory
        while not os.path.isdir(path) and os.path.dirname(path) != path:
            path = os.path.dirname(path)
        st = os.statvfs(path)
        return st.f_bavail * st.f_frsize
