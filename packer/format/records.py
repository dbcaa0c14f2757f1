"""Where each record lies in its shard file, and a digest of its bytes: the ``records`` array.

``samples/records-<h>.npy`` (format 2; earlier 0.2 datasets lack it, and readers ignore it) is
``int64[N, 3]``: for each sample, the byte offset of its payload within its shard file, the
payload's length, and the first 8 bytes of the payload's SHA-256 as a signed integer. A remote
reader fetches any record as one byte range, with no B-tree walk and no backend library, and
checks what it fetched against the digest, record by record: a corrupted range is pinned on one
sample, and refetching it costs that record's bytes, not a block's. Datasets converted before
it have no such array and are read remotely by whole-shard download.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from packer.errors import ShardError
from packer.format.backends import Backend

__all__ = ["digest64", "records_of_shards", "shard_records"]


def digest64(data: bytes | memoryview) -> int:
    """The first 8 bytes of ``data``'s SHA-256, as the signed int64 the records array holds."""
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big", signed=True)


def shard_records(backend: Backend, path: str, num_samples: int) -> np.ndarray:
    """``int64[n, 3]`` (offset, length, digest) of each record of one finished shard file.

    Raises:
        ShardError: the backend cannot locate records, or the file is shorter than they say.
    """
    if backend.ranges is None:
        raise ShardError(f"The {backend.name} backend cannot locate records in {path!r}")
    ranges = backend.ranges(path, num_samples)
    out = np.empty((num_samples, 3), dtype=np.int64)
    out[:, :2] = ranges
    with open(path, "rb") as handle:
        fd = handle.fileno()
        for index, (offset, length) in enumerate(ranges.tolist()):
            data = os.pread(fd, length, offset)
            if len(data) != length:
                raise ShardError(f"Shard {path!r} ends inside record {index}; re-convert it.")
            out[index, 2] = digest64(data)
    return out


def records_of_shards(backend: Backend, shards: Sequence[tuple[str, int]], *,
                      workers: int = 4) -> np.ndarray:
    """The records array of a dataset: :func:`shard_records` of each ``(path, num_samples)``,
    concatenated in shard order (shards are read in parallel; hashing releases the GIL)."""
    if not shards:
        return np.zeros((0, 3), dtype=np.int64)
    with ThreadPoolExecutor(max(1, min(workers, len(shards)))) as pool:
        parts = list(pool.map(lambda shard: shard_records(backend, *shard), shards))
    return np.concatenate(parts) if parts else np.zeros((0, 3), dtype=np.int64)
