"""Read one source file, or say in one reason code why it cannot be packed.

The reason codes are part of the manifest format (``skipped[].reason``):

===================== =======================================================================
``empty_file``        the file has zero bytes
``broken_symlink``    a symlink whose target is missing (or a symlink loop)
``permission_denied`` the file cannot be opened for reading
``not_a_regular_file`` a FIFO, socket or device with an image name (opening it could block)
``not_an_image``      Pillow does not recognise the bytes as any image format
``truncated``         the image data ends early
``decompression_bomb`` width x height is over the pixel limit (``max_pixels``)
``decode_error``      any other failure to decode the image
``missing``           a list file names it, but there is no such file under the root
``corrupt_member``    an archive member whose stored bytes fail the archive's own check (a zip
                      CRC, a compressed stream that does not decompress)
``missing_label``     a WebDataset sample or table row without a usable label
``missing_image``     a WebDataset sample (or row) without an image
``too_large``         an archive member, table cell or record over the ``max_bytes`` bound
                      (``--max-bytes``, default 256 MiB): never read whole, so a small
                      archive that expands to gigabytes costs no more than the bound
===================== =======================================================================
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Final

__all__ = ["OPEN_FLAGS", "SKIP_REASONS", "UnpackableFile", "read_at_most", "read_source"]

SKIP_REASONS: Final[tuple[str, ...]] = (
    "empty_file", "broken_symlink", "permission_denied", "not_a_regular_file",
    "not_an_image", "truncated", "decompression_bomb", "decode_error", "missing",
    "corrupt_member", "missing_label", "missing_image", "too_large",
    # a sample's field that does not fit its type (packer.format.fields): a value of the wrong
    # kind or shape, a mask of another size than its image or with a value that is no class, a
    # box outside its image (clip off) or without area, box labels not one per box
    "invalid_value", "mask_size", "mask_value", "box_outside", "degenerate_box", "box_count",
    # a COCO image without annotations, under drop_unannotated; a WebDataset sample without a
    # member that fields= names
    "no_annotation", "missing_member",
)


class UnpackableFile(Exception):
    """A source file that cannot be packed: ``reason`` is one of :data:`SKIP_REASONS`.

    Internal signal between reading, checking and conversion; conversion turns it into a
    ``skipped`` entry, or into :class:`packer.errors.BadImageError` under ``strict``.
    """

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in SKIP_REASONS:
            raise ValueError(f"unknown skip reason {reason!r}")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


#: How a source file is opened: never waiting on a FIFO for a writer (``O_NONBLOCK`` has no
#: effect on regular files), never taking a terminal, not leaking into child processes.
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)


def read_source(path: str) -> bytes:
    """Return the bytes of the file at ``path`` (following symlinks).

    One ``open``, one ``fstat`` and, for a file that does not change meanwhile, one ``read``
    of its size plus one byte (the extra byte reveals a file that grew, which is then read to
    its end, as is one that shrank).

    Raises:
        UnpackableFile: with ``broken_symlink``, ``permission_denied``, ``not_a_regular_file``
            or ``empty_file``. Any other OSError (an I/O error, a vanished file) propagates.
    """
    try:
        fd = os.open(path, OPEN_FLAGS)
    except FileNotFoundError:
        if os.path.islink(path):
            raise UnpackableFile("broken_symlink", f"symlink to missing {os.readlink(path)!r}") from None
        raise
    except PermissionError as err:
        raise UnpackableFile("permission_denied", str(err)) from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnpackableFile("broken_symlink", "symlink loop") from None
        _refuse_special(path)  # a socket (ENXIO) or the like: what stat says it is
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnpackableFile("not_a_regular_file", _NOT_REGULAR)
        if st.st_size == 0:
            raise UnpackableFile("empty_file", _EMPTY)
        try:
            data = _read_to_end(fd, st.st_size)
        except PermissionError as err:
            raise UnpackableFile("permission_denied", str(err)) from None
    finally:
        os.close(fd)
    if not data:
        raise UnpackableFile("empty_file", _EMPTY)
    return data


_NOT_REGULAR = "not a regular file (FIFO, socket or device)"
_EMPTY = "the file is empty (0 bytes)"


def _refuse_special(path: str) -> None:
    """Raise ``not_a_regular_file`` when ``path`` is not a regular file (else return)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise UnpackableFile("not_a_regular_file", _NOT_REGULAR) from None


def _read_to_end(fd: int, size: int) -> bytes:
    """The file's bytes from the start: ``size`` expected, read until end of file."""
    data = os.read(fd, size + 1)
    if len(data) == size:  # a short read ends at end of file: the common case, one call
        return data
    parts = [data]
    while block := os.read(fd, 1 << 20):
        parts.append(block)
    return b"".join(parts)


def read_at_most(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from the start of ``fd``, fewer only at end of file (a bounded
    read of a file whose size is known: one byte more than it reveals a file that grew)."""
    parts: list[bytes] = []
    left = limit
    while left > 0 and (block := os.read(fd, left)):
        parts.append(block)
        left -= len(block)
    return b"".join(parts)
