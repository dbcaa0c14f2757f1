"""Images a Parquet table names by path instead of holding their bytes.

``datasets``' ``Dataset.to_parquet()`` of a dataset whose Image feature was built from files
writes each image as ``{bytes: null, path: "..."}``: usually an absolute path, or the path as
it was given (``datasets`` then opens it relative to the working directory of whoever reads).
packer reads such an image from its file, on these rules, so that a table can only lead to
files its user chose:

* The path is data: it passes packer's key rules (:mod:`packer.keys`: no ``..``, no control
  characters) before anything is opened, else the row is skipped (``missing_image``).
* A relative path resolves under ``root`` (``root=``, ``--root``) or, without it, under the
  table's own folder, never the working directory, so a conversion does not depend on where
  it runs.
* An absolute path is read only when it lies under ``root``; without ``root``, or outside it,
  the row is skipped (``missing_image``) with the fix: give ``root=`` the folder that holds the
  images, or rewrite the paths relative to the table.
* A path that names no file is ``missing``; an empty file ``empty_file``; one over
  ``max_bytes`` ``too_large`` (told by ``stat``: never read); a directory or device
  ``not_a_regular_file``; one that cannot be reached ``permission_denied``.

Symbolic links under ``root`` are followed, as a tree's are.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Final

from packer.errors import SourceError
from packer.keys import key_problem
from packer.source.sourcefile import OPEN_FLAGS, UnpackableFile, read_at_most
from packer.source.statuses import (
    EMPTY,
    FROM_FILE,
    MISSING,
    NOT_REGULAR,
    OUTSIDE_ROOT,
    PERMISSION_DENIED,
    TOO_LARGE,
    UNSAFE_PATH,
)

__all__ = ["PATH_STATUSES", "ImageFile", "locate_image", "path_detail", "read_image_file", "resolve"]

#: The statuses that are about a row's image path (their messages name it).
PATH_STATUSES: Final = frozenset({MISSING, NOT_REGULAR, OUTSIDE_ROOT, PERMISSION_DENIED, UNSAFE_PATH})

class ImageFile:
    """Where a row's image path leads: ``status`` (:data:`FROM_FILE` when it can be read),
    the file (``full``, ``""`` when refused), and its size and mtime when stat'ed."""

    __slots__ = ("full", "mtime_ns", "size", "status")

    def __init__(self, status: int, full: str = "", size: int = 0, mtime_ns: int = -1) -> None:
        self.status, self.full, self.size, self.mtime_ns = status, full, size, mtime_ns


def resolve(path: str, folder: str, root: str | None) -> ImageFile:
    """The file ``path`` names (see the module docstring), not yet stat'ed; ``folder`` is the
    table's folder, ``root`` the absolute folder given with ``root=`` (or None)."""
    if path.startswith("/"):
        if root is None:
            return ImageFile(OUTSIDE_ROOT)
        prefix = root.rstrip("/") + "/"
        if not path.startswith(prefix):
            return ImageFile(OUTSIDE_ROOT)
        path = path[len(prefix):]
    if key_problem(path) is not None:
        return ImageFile(UNSAFE_PATH)
    parts = [part for part in path.split("/") if part not in ("", ".")]
    return ImageFile(FROM_FILE, os.path.join(root if root is not None else folder, *parts))


def locate_image(path: str, folder: str, root: str | None, max_bytes: int) -> ImageFile:
    """:func:`resolve`, then ``stat`` the file: its status, size and mtime (no byte read)."""
    found = resolve(path, folder, root)
    if found.status != FROM_FILE:
        return found
    try:
        info = os.stat(found.full)
    except PermissionError:
        return ImageFile(PERMISSION_DENIED, found.full)
    except OSError:  # not there, a broken link, a loop, a file where a folder should be
        return ImageFile(MISSING, found.full)
    if not stat.S_ISREG(info.st_mode):
        return ImageFile(NOT_REGULAR, found.full)
    status = EMPTY if info.st_size == 0 else TOO_LARGE if info.st_size > max_bytes else FROM_FILE
    return ImageFile(status, found.full, info.st_size, info.st_mtime_ns)


def path_detail(status: int, path: str, root: str | None) -> str:
    """Why the image ``path`` a row names is not read (one of :data:`PATH_STATUSES`), and the fix."""
    where = f"root {root!r}" if root is not None else "the table's folder"
    if status == OUTSIDE_ROOT:
        if root is None:
            return (f"the image path {path!r} is absolute: give root= the folder that holds the images "
                    "(absolute paths must lie under it), or write the paths relative to the table's folder")
        return f"the image path {path!r} is not under root {root!r}: give root= a folder that holds it"
    if status == UNSAFE_PATH:
        return (f"the image path {path!r} {key_problem(path) or 'is not a safe relative path'}: packer "
                "opens no path that could lead outside its root")
    if status == MISSING:
        return f"the image path {path!r} names no file under {where} (relative paths resolve there)"
    if status == NOT_REGULAR:
        return f"the image path {path!r} names a folder, device or other entry, not a file"
    return f"the image file {path!r} cannot be opened for reading (permission denied)"


def read_image_file(full: str, size: int, mtime_ns: int) -> bytes:
    """The ``size`` bytes of the file ``full``, which the scan found with ``size`` and
    ``mtime_ns`` (and ``size`` within ``max_bytes``): never more than ``size + 1`` bytes read.

    Raises:
        UnpackableFile: ``permission_denied``.
        SourceError: the file is gone or changed since the scan; the message says what to do.
    """
    try:
        fd = os.open(full, OPEN_FLAGS)
    except PermissionError as err:
        raise UnpackableFile("permission_denied", f"{full!r}: {err.strerror or err}") from None
    except OSError as err:
        raise _changed(full, err.strerror or str(err)) from None
    try:
        info = os.fstat(fd)
        if (info.st_size, info.st_mtime_ns) != (size, mtime_ns) or not stat.S_ISREG(info.st_mode):
            raise _changed(full, "its size or modification time differ from the scan's")
        data = read_at_most(fd, size + 1)
    except OSError as err:
        if err.errno == errno.EACCES:
            raise UnpackableFile("permission_denied", f"{full!r}: {err.strerror or err}") from None
        raise _changed(full, err.strerror or str(err)) from None
    finally:
        os.close(fd)
    if len(data) != size:
        raise _changed(full, f"it holds {'more' if len(data) > size else 'fewer'} bytes than when scanned")
    return data


def _changed(full: str, why: str) -> SourceError:
    return SourceError(f"The image file {full!r} a Parquet row names changed during the conversion ({why}): "
                       "restore it, then run the same conversion again with resume=True (or convert "
                       "again with overwrite=True).")
