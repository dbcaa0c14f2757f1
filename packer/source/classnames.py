"""A classes file: one class name per line, line ``i`` naming class ``i`` (list files' labels,
mask trees' pixel values). Read at one place so every source checks the names alike."""

from __future__ import annotations

from packer.errors import SourceError, SourceNotFoundError
from packer.keys import check_name

__all__ = ["read_class_names"]


def read_class_names(path: str) -> tuple[str, ...]:
    """The names in the classes file at ``path``, in order (blank lines and surrounding spaces
    dropped, a UTF-8 byte order mark tolerated).

    Raises:
        SourceNotFoundError: the file cannot be read.
        SourceError: a name appears twice.
        UnsafeKeyError: a name that cannot be a folder name (``..``, a slash, a control character).
    """
    try:
        with open(path, encoding="utf-8-sig") as handle:
            names = tuple(line.strip() for line in handle if line.strip())
    except OSError as err:
        raise SourceNotFoundError(f"Cannot read the classes file {path!r}: {err.strerror or err}.") from None
    if len(set(names)) != len(names):
        raise SourceError(f"The classes file {path!r} names a class twice: one name per label.")
    for name in names:
        check_name(name, source=path, what="class")
    return names
