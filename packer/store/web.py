"""Plain HTTP(S) servers with range support (nginx, a CDN, ``rclone serve http``): read-only.

The manifest names every file, so no listing is needed; sizes come from HEAD requests.

A URL with credentials (``https://user:password@host/data``) is taken apart when the store is
opened: the password goes into the client's basic auth and never into :attr:`Store.url`, so no
message, log line, manifest or report that names the dataset can show it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp

from packer.store.remote import RemoteStore

__all__ = ["HTTPStore"]


class HTTPStore(RemoteStore):
    """A dataset published under an ``http://`` or ``https://`` URL."""

    protocol = "http"
    read_only = True

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        url, self._credentials = without_credentials(url)
        super().__init__(url, storage_options)

    def fs_options(self, options: dict[str, Any]) -> dict[str, Any]:
        client = dict(options.pop("client_kwargs", {}) or {})
        client.setdefault("timeout", aiohttp.ClientTimeout(total=None, sock_connect=min(self.timeout, 10.0),
                                                           sock_read=self.timeout))
        if self._credentials is not None:
            client.setdefault("auth", aiohttp.BasicAuth(*self._credentials))
        return {"client_kwargs": client, **options}

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "credentials": self._credentials}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._credentials = state.get("credentials")


def without_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its ``user:password@`` part, and the ``(user, password)`` it held."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port is not None else host
    credentials = (unquote(parts.username or ""), unquote(parts.password or ""))
    return urlunsplit(parts._replace(netloc=netloc)), credentials
