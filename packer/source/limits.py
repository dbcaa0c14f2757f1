"""How much one item may cost: the ``max_bytes`` bound every source reads within.

Reading one archive member, table cell or record never holds more than ``max_bytes`` of it in
memory, nor spools more of it to disk: a member whose header claims more, or whose compressed
data expands past what its header claims, is skipped (``too_large``, ``corrupt_member``), so a
4 MB zip of a 1 GiB member, or a 17 KB Parquet file with a 300 MB cell, costs what the bound
allows and no more. The bound is a conversion option (``max_bytes``, ``--max-bytes``); it
reaches a source as :attr:`SourceOptions.max_bytes <packer.source.base.SourceOptions>`, which
options built without it (a tool reading a source again) leave at :data:`DEFAULT_MAX_BYTES`.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_MAX_BYTES"]

#: The bound unless told otherwise: 256 MiB, well above any photograph, far below a worker's memory.
DEFAULT_MAX_BYTES: Final = 256 << 20
