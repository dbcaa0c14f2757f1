"""A dataset on a local or mounted file system (NFS, Lustre): today's fast paths, untouched.

Readers of a :class:`LocalStore` get real paths (:meth:`LocalStore.local_path`), so LMDB keeps
its memory map and HDF5 its ``pread``; nothing is copied into a cache.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

from packer.errors import ObjectNotFoundError
from packer.keys import check_key
from packer.store.base import Store
from packer.store.durable import atomic_write_bytes, create_exclusively

__all__ = ["LocalStore"]


class LocalStore(Store):
    """The files under a directory; the URL is its absolute path (a ``file://`` URL is accepted)."""

    is_local = True

    def __init__(self, root: str | os.PathLike[str]) -> None:
        text = os.fspath(root)
        if text.startswith("file://"):
            text = text[len("file://"):]
        super().__init__(os.path.abspath(text))

    def describe(self, key: str = "") -> str:
        return os.path.join(self.url, *key.split("/")) if key else self.url

    def local_path(self, key: str) -> str:
        """``key``'s file under the root; every read, write and delete goes through here.

        Raises:
            UnsafeKeyError: ``key`` could lead outside the root (:func:`packer.keys.check_key`).
        """
        if not key:
            return self.url
        return os.path.join(self.url, *check_key(key, source=self.url, what="key").split("/"))

    def stat(self, key: str) -> int:
        path = self.local_path(key)
        if not os.path.isfile(path):  # a folder is no key
            raise ObjectNotFoundError(f"{self.describe(key)!r} does not exist")
        try:
            return os.path.getsize(path)
        except OSError as err:
            raise ObjectNotFoundError(f"{self.describe(key)!r} does not exist ({err.strerror})") from err

    def read(self, key: str) -> bytes:
        try:
            with open(self.local_path(key), "rb") as handle:
                return handle.read()
        except FileNotFoundError as err:
            raise ObjectNotFoundError(f"{self.describe(key)!r} does not exist") from err

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        try:
            with open(self.local_path(key), "rb") as handle:
                return os.pread(handle.fileno(), max(stop - start, 0), start)
        except FileNotFoundError as err:
            raise ObjectNotFoundError(f"{self.describe(key)!r} does not exist") from err

    def sizes(self, keys: Sequence[str]) -> dict[str, int | None]:
        found: dict[str, int | None] = {}
        for key in keys:
            path = self.local_path(key)
            try:
                found[key] = os.path.getsize(path) if os.path.isfile(path) else None
            except OSError:
                found[key] = None
        return found

    def put(self, key: str, data: bytes) -> None:
        path = self.local_path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write_bytes(path, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self.local_path(key)
        for _ in range(3):  # a folder removed between making it and linking into it: again
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                return create_exclusively(path, data)
            except FileNotFoundError:
                continue
        return create_exclusively(path, data)

    def put_file(self, key: str, path: str) -> None:
        target = self.local_path(key)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        partial = f"{target}.{os.getpid()}.part"
        try:
            shutil.copyfile(path, partial)
            with open(partial, "rb+") as handle:
                os.fsync(handle.fileno())
            os.replace(partial, target)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)

    def list(self, prefix: str = "") -> dict[str, int]:
        top = self.local_path(prefix)
        found: dict[str, int] = {}
        if os.path.isfile(top):
            return {prefix: os.path.getsize(top)}
        for folder, _, files in os.walk(top):
            for name in files:
                path = os.path.join(folder, name)
                key = os.path.relpath(path, self.url).replace(os.sep, "/")
                try:
                    found[key] = os.path.getsize(path)
                except OSError:
                    continue
        return found

    def delete(self, key: str) -> None:
        try:
            os.unlink(self.local_path(key))
        except FileNotFoundError:
            pass
