"""Layer 1, where bytes live: a local path or an object-store / HTTP URL behind one small
:class:`Store` interface, and the node's bounded cache (:mod:`packer.store.cache`).

``format/`` and ``source/`` read through it; nothing above names a cloud. Names are imported
on first use, so ``import packer`` loads no cloud client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packer.lazy import lazy_exports

if TYPE_CHECKING:
    from packer.store.base import Store
    from packer.store.cache import CacheInfo, NodeCache, default_cache_dir
    from packer.store.local import LocalStore
    from packer.store.urls import STORES, is_url, open_store

__all__ = ["CacheInfo", "LocalStore", "NodeCache", "STORES", "Store", "default_cache_dir", "is_url",
           "open_store"]
__getattr__, __dir__ = lazy_exports(__name__, {
    ".base": ["Store"],
    ".local": ["LocalStore"],
    ".urls": ["STORES", "is_url", "open_store"],
    ".cache": ["CacheInfo", "NodeCache", "default_cache_dir"],
}, __all__)
