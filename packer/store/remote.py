"""Object stores and HTTP servers through fsspec (s3fs, gcsfs, adlfs, aiohttp): the ``remote`` extra.

Why fsspec and not obstore (measured here, see docs/remote.md): obstore's Rust runtime is not
fork-safe (a forked DataLoader worker hangs on its first request, even with a store created after
the fork), while an fsspec filesystem created in the child works and an inherited one fails fast.
So a :class:`RemoteStore` holds only its URL and options and creates its filesystem lazily, once
per process (keyed by pid, outside fsspec's instance cache): no client, connection pool or event
loop crosses a fork.

Credentials and endpoints come from each cloud's usual environment and config files (for S3:
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``/``AWS_DEFAULT_REGION``,
``AWS_ENDPOINT_URL`` for S3-compatible stores, ``~/.aws``), or from ``storage_options``, passed
to the fsspec filesystem as they are, except packer's own keys: ``retries`` (see
:class:`~packer.store.retrying.RetryPolicy`), ``timeout`` (seconds a response may stall) and
``concurrency`` (ranges fetched at once).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final
from urllib.parse import urlsplit

from packer.errors import ObjectNotFoundError, StoreError
from packer.keys import check_key
from packer.per_process import PerProcess
from packer.store.base import Store
from packer.store.retrying import RetryPolicy, ShortRead, retry

__all__ = ["RemoteStore"]

#: packer's own keys of ``storage_options``; the rest go to the fsspec filesystem.
_OWN_OPTIONS: Final = ("retries", "timeout", "concurrency")


class RemoteStore(Store):
    """A dataset under an object-store or HTTP URL; see the module docstring. Each cloud is a
    subclass that names its fsspec ``protocol`` and adds its defaults (:meth:`fs_options`)."""

    protocol: str = ""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        super().__init__(url.rstrip("/"))
        parts = urlsplit(self.url)
        self.scheme = parts.scheme
        self._options = dict(storage_options or {})
        self.policy = RetryPolicy(retries=int(self._options.get("retries", RetryPolicy.retries)))
        self.timeout = float(self._options.get("timeout", 30.0))
        self.concurrency = int(self._options.get("concurrency", 32))
        if self.read_only:
            self._root = self.url
        else:
            self._root = f"{parts.netloc}{parts.path}".rstrip("/")
            if not parts.netloc:
                raise ValueError(f"{url!r} names no bucket: write {self.scheme}://BUCKET/PREFIX")
        self._fs_here: PerProcess[Any] = PerProcess(self._new_fs)

    # -- the filesystem, one per process --------------------------------------------------

    def _fs(self) -> Any:
        return self._fs_here.get()

    def _new_fs(self) -> Any:
        import fsspec  # the extra: each cloud's module imports its client first

        options = {k: v for k, v in self._options.items() if k not in _OWN_OPTIONS}
        return fsspec.filesystem(self.protocol, skip_instance_cache=True, **self.fs_options(options))

    def fs_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The filesystem's options: the user's, plus this cloud's defaults."""
        return options

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], state["options"])  # type: ignore[misc]

    def options(self) -> Mapping[str, Any]:
        return dict(self._options)

    # -- keys ---------------------------------------------------------------------------

    def _path(self, key: str) -> str:
        """``key``'s path for the client; every request goes through here.

        Raises:
            UnsafeKeyError: ``key`` could lead outside the root (:func:`packer.keys.check_key`).
        """
        return f"{self._root}/{check_key(key, source=self.url, what='key')}" if key else self._root

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return retry(lambda: fn(*args, **kwargs), what, self.policy)

    def _writable(self, key: str) -> None:
        self.check_writable()

    # -- the Store interface --------------------------------------------------------------

    def stat(self, key: str) -> int:
        info = self._call(self.describe(key), lambda: self._fs().info(self._path(key)))
        return int(info["size"])

    def read(self, key: str) -> bytes:
        data: bytes = self._call(self.describe(key), lambda: self._fs().cat_file(self._path(key)))
        return data

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        if stop <= start:  # an empty range: a client would ask for the whole object
            return b""

        def fetch() -> bytes:
            data: bytes = self._fs().cat_file(self._path(key), start=start, end=stop)
            if len(data) > stop - start:  # the whole object: retrying cannot help
                raise StoreError(f"{self.describe(key)}: the server ignored a Range request (sent "
                                 f"{len(data)} bytes for {stop - start}); serve the dataset from "
                                 "a server with range support (nginx, a CDN, an object store).")
            # Fewer bytes: a range past the object's end, or a transfer cut short (retried).
            if len(data) != stop - start and len(data) != self.stat(key) - start:
                raise ShortRead(f"got {len(data)} of {stop - start} bytes")
            return data

        return self._call(f"{self.describe(key)} bytes {start}-{stop}", fetch)  # type: ignore[no-any-return]

    def read_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        if len(ranges) <= 1:
            return [self.read_range(key, start, stop) for start, stop in ranges]
        with ThreadPoolExecutor(min(self.concurrency, len(ranges))) as pool:
            return list(pool.map(lambda r: self.read_range(key, r[0], r[1]), ranges))

    def sizes(self, keys: Sequence[str]) -> dict[str, int | None]:
        if not self.read_only:  # one listing beats a request per key
            listed = self.list()
            return {key: listed.get(key) for key in keys}

        def size(key: str) -> int | None:
            try:
                return self.stat(key)
            except ObjectNotFoundError:
                return None

        with ThreadPoolExecutor(max(1, min(self.concurrency, len(keys)))) as pool:
            return dict(zip(keys, pool.map(size, keys), strict=True))

    def put(self, key: str, data: bytes) -> None:
        self._writable(key)
        self._call(self.describe(key), lambda: self._fs().pipe_file(self._path(key), data))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._writable(key)

        def create() -> bool:
            try:
                self._create(self._path(key), data)
            except FileExistsError:
                return False
            return True

        created: bool = self._call(self.describe(key), create)
        return created

    def _create(self, path: str, data: bytes) -> None:
        """Write ``path`` only if it is absent, else raise FileExistsError: fsspec's
        ``pipe_file(..., mode="create")`` where the client takes it (gcsfs sends it as the
        precondition ``ifGenerationMatch=0``); each cloud may override this."""
        fs = self._fs()
        if "mode" not in _parameters(getattr(fs, "_pipe_file", fs.pipe_file)):
            raise StoreError(f"{self.describe()}: this version of the {self.protocol} client cannot "
                             "create an object only if it is absent, which the lease that keeps two "
                             "writers apart needs: upgrade fsspec and the client.")
        fs.pipe_file(path, data, mode="create")

    def put_file(self, key: str, path: str) -> None:
        self._writable(key)
        self._call(self.describe(key), lambda: self._fs().put_file(path, self._path(key)))

    def list(self, prefix: str = "") -> dict[str, int]:
        if self.read_only:
            raise StoreError(f"Cannot list {self.describe(prefix)}: an HTTP server has no listing; "
                             "packer reads what the manifest names instead.")
        top = self._path(prefix)

        def walk() -> dict[str, int]:
            fs = self._fs()
            try:
                found = fs.find(top, detail=True)
            except FileNotFoundError:
                return {}
            return {name[len(self._root) + 1:]: int(info.get("size") or 0)
                    for name, info in found.items() if info.get("type", "file") == "file"}

        listed: dict[str, int] = self._call(self.describe(prefix), walk)
        return listed

    def delete(self, key: str) -> None:
        self._writable(key)

        def remove() -> None:
            try:
                self._fs().rm_file(self._path(key))
            except FileNotFoundError:
                pass

        self._call(self.describe(key), remove)


def _parameters(method: Any) -> tuple[str, ...]:
    """The parameter names of a client's method (none where they cannot be read)."""
    try:
        return tuple(inspect.signature(method).parameters)
    except (TypeError, ValueError):
        return ()
