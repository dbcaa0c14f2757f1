"""Layer 1, where bytes live: a local path or an object-store / HTTP URL behind one small
:class:`Store` interface, and the node's bounded cache (:mod:`packer.store.cache.node`).

``format/`` and ``source/`` read through it; nothing above names a cloud. Names are imported
on first use, so ``import packer`` loads no cloud client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packer.lazy import lazy_exports

if TYPE_CHECKING:
    from packer.store.base import Store
    from packer.store.cache.node import CacheInfo, NodeCache
    from packer.store.urls import open_store, register_store, store_schemes

__all__ = ["CacheInfo", "NodeCache", "Store", "open_store", "register_store", "store_schemes"]
_INTERNAL = "it is internal (its module may change in any release)"
__getattr__, __dir__ = lazy_exports(__name__, {
    ".base": ["Store"],
    ".urls": ["open_store", "register_store", "store_schemes"],
    ".cache.node": ["CacheInfo", "NodeCache"],
}, __all__, deprecated={
    "LocalStore": (".local", "open a path with packer.open_store(path)"),
    "STORES": (".urls", "use packer.store_schemes() and packer.register_store()"),
    "default_cache_dir": (".cache.node", "NodeCache().directory is the cache in use"),
    "is_url": (".urls", _INTERNAL),
})
