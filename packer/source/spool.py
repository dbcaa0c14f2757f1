"""Decompressed copies of ``.tar.gz`` archives, so that workers read members by byte range.

gzip cannot be read from the middle, so the first process on a node that reads a member of a
compressed archive decompresses it once, sequentially, into a spool file in a node-local
directory (``$PACKER_SPOOL_DIR``, default ``<tempdir>/packer-spool-<uid>``); every other
process and worker on the node waits for it (an exclusive ``flock``) and then ``pread``s it.
The cost is one more sequential decompression and disk space for the uncompressed archive:
for a huge archive, ``gunzip`` it once and convert the ``.tar``.

Spools are named by the archive's path, size and modification time, written under a
temporary name and renamed into place, so a spool that exists is complete and belongs to
that version of the archive. They do not accumulate: a conversion deletes the spool it made
when it ends (``Source.close()``, :func:`remove_spool`), and making a spool deletes the spools
of older versions of the same archive and any spool unused for :data:`MAX_IDLE_SECONDS` (what a
killed run, or an array task on another node, left behind).
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import os
import shutil
import tempfile
import time
import zlib
from typing import Final

from packer.errors import SourceError

__all__ = ["MAX_IDLE_SECONDS", "SPOOL_ENV", "ensure_spool", "remove_spool", "spool_dir", "spool_path"]

#: The environment variable naming the spool directory.
SPOOL_ENV: Final = "PACKER_SPOOL_DIR"
#: A spool nobody opened for this long is deleted when another spool is made.
MAX_IDLE_SECONDS: Final = 3 * 24 * 3600
_CHUNK: Final = 1 << 20


def spool_dir() -> str:
    """Where spools live: ``$PACKER_SPOOL_DIR``, else a per-user folder of the temp directory."""
    return os.environ.get(SPOOL_ENV) or os.path.join(tempfile.gettempdir(), f"packer-spool-{os.getuid()}")


def _archive_key(path: str) -> str:
    return hashlib.sha256(os.path.abspath(path).encode("utf-8", "surrogateescape")).hexdigest()[:20]


def spool_path(path: str, size: int, mtime_ns: int) -> str:
    """The spool of the archive ``path`` as it was (``size`` bytes, modified at ``mtime_ns``)."""
    version = hashlib.sha256(f"{size}:{mtime_ns}".encode()).hexdigest()[:12]
    return os.path.join(spool_dir(), f"{_archive_key(path)}-{version}.tar")


def ensure_spool(path: str, size: int, mtime_ns: int) -> str:
    """The spool of ``path``, made now (under the node-wide lock) if no process made it yet.

    A damaged gzip stream is decompressed as far as it goes; the scan already reported where it
    fails, and members past that point are never read.

    Raises:
        SourceError: the spool cannot be written (no space, no permission); the message names
            the directory, :data:`SPOOL_ENV` and ``gunzip`` as ways out.
    """
    final = spool_path(path, size, mtime_ns)
    if _touch(final):
        return final
    folder = os.path.dirname(final)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        with open(final + ".lock", "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                if _touch(final):
                    return final
                _prune(folder, _archive_key(path), keep=final)
                _decompress(path, final)
            finally:
                if os.path.exists(final):
                    _unlink(final + ".lock")
    except OSError as err:
        raise SourceError(f"Cannot write the decompressed copy of {path!r} in {folder!r}: "
                          f"{err.strerror or err}. Free space there (it needs the archive's "
                          f"uncompressed size), point {SPOOL_ENV} at a larger local disk, or gunzip "
                          "the archive and convert the .tar.") from err
    return final


def _decompress(path: str, final: str) -> None:
    temporary = f"{final}.{os.getpid()}.tmp"
    try:
        with open(path, "rb") as source, gzip.GzipFile(fileobj=source, mode="rb") as stream, \
                open(temporary, "wb") as target:
            free = shutil.disk_usage(os.path.dirname(final)).free
            if free < os.fstat(source.fileno()).st_size:
                raise OSError(28, f"only {free} bytes free")
            while True:
                try:
                    chunk = stream.read1(_CHUNK)
                except (EOFError, zlib.error, gzip.BadGzipFile):
                    break  # damaged: keep what decompressed; the scan noted it
                if not chunk:
                    break
                target.write(chunk)
        os.replace(temporary, final)
    finally:
        _unlink(temporary)


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
    """Delete the spool of ``path`` (that version of it) on this node; True if there was one."""
    final = spool_path(path, size, mtime_ns)
    existed = os.path.exists(final)
    _unlink(final)
    return existed
