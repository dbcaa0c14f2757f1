"""Writes that survive a crash: temporary name, fsync, atomic rename, fsync of the directory."""

from __future__ import annotations

import os
import uuid

from packer.digests import SHA256
from packer.errors import OutputError

__all__ = ["atomic_write_bytes", "create_exclusively", "fsync_dir", "is_temporary_name", "sha256_file",
           "write_named_file"]


def fsync_dir(path: str) -> None:
    """Make renames and new entries in directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temporary_path(path: str) -> str:
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}.{os.getpid()}.tmp")


def is_temporary_name(name: str) -> bool:
    """Whether ``name`` is one of :func:`atomic_write_bytes`'s temporary files."""
    return name.startswith(".") and name.endswith(".tmp")


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = _temporary_path(path)
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def create_exclusively(path: str, data: bytes) -> bool:
    """Create ``path`` holding ``data``, whole, unless it exists; return whether this call did.

    Written aside (``.<name>.<pid>.<random>.tmp``) and fsynced, then hard-linked into place:
    ``link`` fails when the name exists, on local disks and NFS alike, so of several processes
    racing to create one file exactly one wins and the others see its complete content.
    """
    directory, name = os.path.split(os.path.abspath(path))
    aside = os.path.join(directory, f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    with open(aside, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(aside, path)
    except FileExistsError:
        return False
    finally:
        os.unlink(aside)
    fsync_dir(directory)
    return True


def sha256_file(path: str) -> str:
    """Hex SHA-256 of a file's bytes (:meth:`packer.digests.DigestAlgorithm.file`)."""
    return SHA256.file(path)


def write_named_file(path: str | os.PathLike[str], data: bytes, what: str) -> None:
    """:func:`atomic_write_bytes` to a path the user named (``-o``); a failure is an
    :class:`OutputError` that names ``what`` and the path."""
    target = os.fspath(path)
    try:
        atomic_write_bytes(target, data)
    except OSError as err:
        raise OutputError(f"Cannot write {what} to {target!r}: {err.strerror or err}; choose "
                          "another -o path.") from err
