"""What every store provides: the files of one dataset, by key, wherever they live.

A key is a POSIX path relative to the dataset's root (``index.json``, ``samples/targets-...npy``,
``shard-....lmdb``). A store knows bytes, not datasets: it never parses what it reads.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from packer.errors import StoreError

__all__ = ["Store"]


class Store(ABC):
    """The files under one root: stat, read a range, read whole, put (also only if absent),
    list, delete.

    Stores pickle as their URL and options; any client a remote store needs is created lazily
    in the process that uses it (never inherited across a fork).
    """

    #: ``True`` where every key is a file on a local or mounted file system (:meth:`local_path`).
    is_local: bool = False
    #: ``True`` where nothing can be written (an HTTP server).
    read_only: bool = False

    def __init__(self, url: str) -> None:
        self.url = url

    def describe(self, key: str = "") -> str:
        """The URL (or path) of ``key``, for messages."""
        return f"{self.url.rstrip('/')}/{key}" if key else self.url

    def local_path(self, key: str) -> str | None:
        """The file holding ``key`` on this machine, or ``None`` when its bytes must be fetched."""
        return None

    @abstractmethod
    def stat(self, key: str) -> int:
        """The size of ``key`` in bytes.

        Raises:
            ObjectNotFoundError: there is no such key.
        """

    @abstractmethod
    def read(self, key: str) -> bytes:
        """All of ``key``'s bytes."""

    @abstractmethod
    def read_range(self, key: str, start: int, stop: int) -> bytes:
        """Bytes ``start:stop`` of ``key``; fewer only where the object is shorter."""

    def read_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Several ranges of one key; remote stores fetch them concurrently."""
        return [self.read_range(key, start, stop) for start, stop in ranges]

    @abstractmethod
    def sizes(self, keys: Sequence[str]) -> dict[str, int | None]:
        """Each key's size, ``None`` where it is missing, in as few requests as the store allows."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Write ``key`` whole and atomically: a reader sees the old object or the new one."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` holding ``data``, whole, unless it exists; return whether this call did.

        Of several processes racing to create one key, on one host or many, exactly one gets
        ``True`` (what a lease needs: :mod:`packer.store.lease.claim`). A call whose reply was lost
        and was retried may get ``False`` for the object it created itself: read it to tell.

        Raises:
            StoreError: this store cannot create a key only if it is absent.
        """
        raise StoreError(f"{self.describe(key)}: {type(self).__name__} cannot create an object only "
                         "if it is absent, which the lease that keeps two writers apart needs; "
                         "write the dataset through another store.")

    @abstractmethod
    def put_file(self, key: str, path: str) -> None:
        """Upload the local file ``path`` as ``key`` (large files in parts where that helps)."""

    @abstractmethod
    def list(self, prefix: str = "") -> dict[str, int]:
        """Every key under ``prefix`` (recursively) with its size."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key``; a missing key is no error."""

    def exists(self, key: str) -> bool:
        """Whether ``key`` is there."""
        return self.sizes([key]).get(key) is not None

    def check_writable(self) -> None:
        """Fail before any upload when this store cannot be written.

        Raises:
            StoreError: the store is read-only (an HTTP URL).
        """
        if self.read_only:
            raise StoreError(f"Cannot write to {self.url}: it is read-only; publish to an object "
                             "store (s3://, gs://, az://) instead.")

    def options(self) -> Mapping[str, Any]:
        """The options this store was opened with (pickled with it)."""
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"
