"""The cache directory's files, below :class:`~packer.store.cache.node.NodeCache`: locks, the shared
byte count, entries (whose mtime is their last use) and downloads in progress (whose names say
their size and owner), so that several processes can share one directory safely."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import stat
import time
from typing import Final

__all__ = ["Entry", "alive", "namespace", "read_usage", "scan_entries", "sha1", "sweep_temps",
           "touch", "write_usage"]

log = logging.getLogger(__name__)

_TOUCH_EVERY: Final = 1.0  # seconds: an entry's last-use time is bumped at most this often
_STALE_TEMP: Final = 3600.0  # seconds without a write after which any temp is abandoned
Entry = tuple[float, int, str]  # (last use, bytes, path)


def read_usage(fd: int) -> tuple[int | None, int]:
    """(bytes held, reservations since the last scan); None when unknown (a scan is needed)."""
    fields = os.pread(fd, 64, 0).split()
    try:
        return int(fields[0]), int(fields[1])
    except (IndexError, ValueError):
        return None, 0


def write_usage(fd: int, usage: int, since: int) -> None:
    data = f"{max(usage, 0)} {since}\n".encode("ascii")
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))


def touch(path: str) -> os.stat_result | None:
    """Stat a complete entry and bump its last use (at most once a second); None when absent."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    if time.time() - st.st_mtime > _TOUCH_EVERY:
        with contextlib.suppress(OSError):  # evicted meanwhile, or another user's read-only cache
            os.utime(path)
    return st


def scan_entries(root: str) -> list[Entry]:
    """Every entry under `root`, least recently used first."""
    found: list[Entry] = []
    folders = [root]
    while folders:
        try:
            listing = os.scandir(folders.pop())
        except (FileNotFoundError, NotADirectoryError):
            continue
        with listing:
            for item in listing:
                try:
                    if item.is_dir(follow_symlinks=False):
                        folders.append(item.path)
                        continue
                    st = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    found.append((st.st_mtime, st.st_size, item.path))
    found.sort()
    return found


def sweep_temps(folder: str) -> int:
    """Remove abandoned temp files from `folder`; return the bytes reserved by the others."""
    reserved, now = 0, time.time()
    try:
        listing = os.scandir(folder)
    except FileNotFoundError:
        return 0
    with listing:
        for item in listing:
            parts = item.name.split(".")
            try:
                st = item.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            known = len(parts) == 5 and parts[1].isdigit() and parts[3].isdigit()
            dead = known and parts[2] == namespace() and not alive(int(parts[3]))
            if dead or now - st.st_mtime > _STALE_TEMP:
                log.debug("removing abandoned download %s", item.path)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(item.path)
            else:
                reserved += max(int(parts[1]) if known else 0, st.st_size)
    return reserved


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process; a pid out of range
        return True
    return True


@functools.cache
def namespace() -> str:
    """This host's pid namespace, so a pid in a temp's name is only judged where it means something."""
    try:
        ns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        ns = ""
    return sha1(f"{os.uname().nodename}:{ns}")[:8]


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()
