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
===================== =======================================================================
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Final

__all__ = ["SKIP_REASONS", "UnpackableFile", "read_source"]

SKIP_REASONS: Final[tuple[str, ...]] = (
    "empty_file", "broken_symlink", "permission_denied", "not_a_regular_file",
    "not_an_image", "truncated", "decompression_bomb", "decode_error", "missing",
    "corrupt_member", "missing_label", "missing_image",
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


def read_source(path: str) -> bytes:
    """Return the bytes of the file at ``path`` (following symlinks).

    Raises:
        UnpackableFile: with ``broken_symlink``, ``permission_denied``, ``not_a_regular_file``
            or ``empty_file``. Any other OSError (an I/O error, a vanished file) propagates.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise UnpackableFile("broken_symlink", f"symlink to missing {os.readlink(path)!r}") from None
        raise
    except PermissionError as err:
        raise UnpackableFile("permission_denied", str(err)) from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UnpackableFile("broken_symlink", "symlink loop") from None
        raise
    if not stat.S_ISREG(st.st_mode):
        raise UnpackableFile("not_a_regular_file", "not a regular file (FIFO, socket or device)")
    if st.st_size == 0:
        raise UnpackableFile("empty_file", "the file is empty (0 bytes)")
    try:
        with open(path, "rb", buffering=0) as handle:
            data = handle.read()
    except PermissionError as err:
        raise UnpackableFile("permission_denied", str(err)) from None
    if not data:
        raise UnpackableFile("empty_file", "the file is empty (0 bytes)")
    return data
