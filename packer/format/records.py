"""Where each record lies in its shard file, and a digest of its bytes: the ``records`` array.

``samples/records-<h>.npy`` (format 2; earlier 0.2 datasets lack it, and readers ignore it) is
``int64[N, 3]``: for each sample, the byte offset of its payload within its shard file, the
payload's length, and the first 8 bytes of the payload's digest (by the manifest's ``digest``
algorithm: SHA-256 or BLAKE3, :mod:`packer.digests`) as a signed integer. A remote
reader fetches any record as one byte range, with no B-tree walk and no backend library, and
checks what it fetched against the digest, record by record: a corrupted range is pinned on one
sample, and refetching it costs that record's bytes, not a block's. Datasets converted before
it have no such array and are read remotely by whole-shard download.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from packer.digests import SHA256, DigestAlgorithm
from packer.errors import ShardError
from packer.format.backends import Backend

__all__ = ["RECORD_COLUMNS", "digest64", "digest_prefix", "records_from_bytes", "records_of_shards",
           "records_to_bytes", "shard_records", "shard_records_of"]

#: Columns of the records array: offset, length, digest.
RECORD_COLUMNS = 3
_DTYPE = np.dtype("<i8")


def digest64(data: bytes | memoryview, digest: DigestAlgorithm = SHA256) -> int:
    """The first 8 bytes of ``data``'s digest (by the dataset's algorithm, ``digest``), as the
    signed int64 the records array holds."""
    return digest_prefix(digest.of(data))


def digest_prefix(digest: bytes) -> int:
    """The first 8 bytes of a digest, as the signed int64 that records and source identities hold."""
    return int.from_bytes(digest[:8], "big", signed=True)


def shard_records(backend: Backend, path: str, num_samples: int,
                  digest: DigestAlgorithm = SHA256) -> np.ndarray:
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
            out[index, 2] = digest64(data, digest)
    return out


def shard_records_of(backend: Backend, path: str, digests: Sequence[int]) -> np.ndarray:
    """:func:`shard_records` of a shard file just written, whose payloads' digests (``digest64``
    of each, in order) the writer already knows: only the backend's ranges are read.

    Raises:
        ShardError: the backend cannot locate records.
    """
    if backend.ranges is None:
        raise ShardError(f"The {backend.name} backend cannot locate records in {path!r}")
    out = np.empty((len(digests), RECORD_COLUMNS), dtype=np.int64)
    out[:, :2] = backend.ranges(path, len(digests))
    out[:, 2] = np.asarray(digests, dtype=np.int64)
    return out


def records_to_bytes(records: np.ndarray) -> bytes:
    """A shard's rows as compact bytes (little-endian int64, row by row), for its receipt."""
    return np.ascontiguousarray(records, dtype=_DTYPE).tobytes()


def records_from_bytes(data: bytes, num_samples: int) -> np.ndarray | None:
    """The rows :func:`records_to_bytes` gave, or None when ``data`` does not hold
    ``num_samples`` of them (a damaged receipt: the rows are then read from the shard)."""
    if len(data) != num_samples * RECORD_COLUMNS * _DTYPE.itemsize:
        return None
    return np.frombuffer(data, dtype=_DTYPE).reshape(num_samples, RECORD_COLUMNS).astype(np.int64)


def records_of_shards(backend: Backend, shards: Sequence[tuple[str, int]], *,
                      known: Sequence[np.ndarray | None] = (), workers: int = 4,
                      digest: DigestAlgorithm = SHA256) -> np.ndarray:
    """The records array of a dataset, its shards' rows concatenated in shard order.

    ``known[i]``, where given and not None, is shard ``i``'s rows as the task that wrote it
    computed them; the others are :func:`shard_records` of each ``(path, num_samples)``, read
    in parallel (hashing releases the GIL).
    """
    if not shards:
        return np.zeros((0, RECORD_COLUMNS), dtype=np.int64)
    parts: list[np.ndarray | None] = [known[i] if i < len(known) else None for i in range(len(shards))]
    missing = [i for i, part in enumerate(parts) if part is None]
    if missing:
        with ThreadPoolExecutor(max(1, min(workers, len(missing)))) as pool:
            found = pool.map(lambda i: shard_records(backend, *shards[i], digest), missing)
            for i, rows in zip(missing, found, strict=True):
                parts[i] = rows
    return np.concatenate([part for part in parts if part is not None])
