"""Which store a dataset location names: a path, or a URL whose scheme picks the store."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from packer.registry import Lazy, Registry
from packer.store.base import Store
from packer.store.local import LocalStore

__all__ = ["STORES", "is_url", "open_store", "register_store", "store_schemes"]

#: Store class of each URL scheme (``file`` and plain paths: :class:`LocalStore`).
STORES: Registry[type[Store]] = Registry("storage URL scheme", entry_points="packer.stores", builtins={
    "file": Lazy("packer.store.local:LocalStore"),
    "s3": Lazy("packer.store.s3:S3Store", "remote"),
    "http": Lazy("packer.store.web:HTTPStore", "remote"),
    "https": Lazy("packer.store.web:HTTPStore", "remote"),
    "gs": Lazy("packer.store.gcs:GCSStore", "gcs"),
    "gcs": Lazy("packer.store.gcs:GCSStore", "gcs"),
    "az": Lazy("packer.store.azure:AzureStore", "azure"),
    "abfs": Lazy("packer.store.azure:AzureStore", "azure"),
})

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def scheme_of(location: str | os.PathLike[str]) -> str:
    """``"s3"`` for ``s3://bucket/x``; ``"file"`` for a path or a ``file://`` URL."""
    match = _SCHEME.match(os.fspath(location)) if isinstance(location, str) else None
    return match.group(1).lower() if match else "file"


def is_url(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` is a URL of a remote store (not a path, not ``file://``)."""
    return scheme_of(location) != "file"


def store_schemes() -> tuple[str, ...]:
    """Every URL scheme a store serves (``file`` is a local path)."""
    return STORES.names()


def register_store(scheme: str, store: type[Store], *, replace: bool = False) -> None:
    """Serve ``scheme://`` URLs with ``store`` (a plugin; see the contract in :mod:`packer.testing`).

    ``store(url, storage_options)`` must open the URL; the class pickles as its URL and options.

    Raises:
        ValueError: the scheme is taken and ``replace`` is off.
    """
    STORES.register(scheme.lower(), store, replace=replace)


def open_store(location: str | os.PathLike[str] | Store,
               storage_options: Mapping[str, Any] | None = None) -> Store:
    """The store of a dataset location: a path, ``file://``, ``s3://``, ``gs://``, ``az://``,
    ``http(s)://`` (or a store already open, returned as it is).

    Raises:
        UnknownNameError: a scheme no store serves (the message lists the schemes).
        MissingExtraError: the scheme's client is not installed; names the extra.
    """
    if isinstance(location, Store):
        return location
    scheme = scheme_of(location)
    if scheme == "file":
        if storage_options:
            raise ValueError("storage_options apply to URLs (s3://, gs://, az://, http://), not to a path")
        return LocalStore(location)
    cls = STORES.get(scheme)
    return cls(os.fspath(location), storage_options)  # type: ignore[call-arg]
