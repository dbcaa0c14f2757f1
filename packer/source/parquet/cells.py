"""A batch's binary cells read in place: each cell's length from the column's offsets and its
bytes as a view of Arrow's buffer, so a cell over ``max_bytes`` is told without copying it."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

__all__ = ["binary_cells", "bytes_of"]


def bytes_of(column: pa.Array) -> pa.Array:
    """An Image column's ``bytes`` (Hugging Face's ``{bytes, path}`` structs), or a binary column."""
    if pa.types.is_struct(column.type):
        return dict(zip([f.name for f in column.type], column.flatten(), strict=True))["bytes"]
    return column


def binary_cells(column: pa.Array) -> Iterator[memoryview | None]:
    """Each cell of a binary column as a view of its bytes (None for a null cell), in row order."""
    if not pa.types.is_large_binary(column.type) and not pa.types.is_binary(column.type):
        column = column.cast(pa.large_binary())
    wide = pa.types.is_large_binary(column.type)
    buffers = column.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64 if wide else np.int32)[
        column.offset:column.offset + len(column) + 1]
    data = memoryview(buffers[2]) if buffers[2] is not None else memoryview(b"")
    nulls = column.is_null().to_numpy(zero_copy_only=False)
    for i in range(len(column)):
        yield None if nulls[i] else data[int(offsets[i]):int(offsets[i + 1])]
