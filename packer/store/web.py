"""Plain HTTP(S) servers with range support (nginx, a CDN, ``rclone serve http``): read-only.

The manifest names every file, so no listing is needed; sizes come from HEAD requests.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from packer.store.remote import RemoteStore

__all__ = ["HTTPStore"]


class HTTPStore(RemoteStore):
    """A dataset published under an ``http://`` or ``https://`` URL."""

    protocol = "http"
    read_only = True

    def fs_options(self, options: dict[str, Any]) -> dict[str, Any]:
        client = dict(options.pop("client_kwargs", {}) or {})
        client.setdefault("timeout", aiohttp.ClientTimeout(total=None, sock_connect=min(self.timeout, 10.0),
                                                           sock_read=self.timeout))
        return {"client_kwargs": client, **options}
