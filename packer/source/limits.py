"""How much one item may cost: the ``max_bytes`` bound every source reads within.

Reading one archive member, table cell or record never holds more than ``max_bytes`` of it in
memory, nor spools more of it to disk: a member whose header claims more, or whose compressed
data expands past what its header claims, is skipped (``too_large``, ``corrupt_member``), so a
4 MB zip of a 1 GiB member, or a 17 KB Parquet file with a 300 MB cell, costs what the bound
allows and no more. The bound is a conversion option (``max_bytes``, ``--max-bytes``); it
reaches a source as :class:`BoundedOptions`, its :class:`~packer.source.base.SourceOptions`
plus the bound. Options built without it (a tool reading a source again) get
:data:`DEFAULT_MAX_BYTES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from packer.source.base import SourceOptions

__all__ = ["DEFAULT_MAX_BYTES", "BoundedOptions", "max_bytes_of"]

#: The bound unless told otherwise: 256 MiB, well above any photograph, far below a worker's memory.
DEFAULT_MAX_BYTES: Final = 256 << 20


@dataclass(frozen=True)
class BoundedOptions(SourceOptions):
    """:class:`SourceOptions` with the per-item bound (``max_bytes``, in bytes)."""

    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        if self.max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, not {self.max_bytes}")


def max_bytes_of(options: SourceOptions) -> int:
    """The bound ``options`` carry: theirs when they are :class:`BoundedOptions`, else the default."""
    return options.max_bytes if isinstance(options, BoundedOptions) else DEFAULT_MAX_BYTES
