"""The storage backend registry: a name (the value of ``--to``) maps to a :class:`Backend`.

Backend modules are imported on first use, so ``import packer`` stays light.
"""

from __future__ import annotations

import importlib

from packer.errors import UnknownNameError
from packer.format.backends.base import Backend, ShardReader, ShardWriter

__all__ = ["Backend", "ShardReader", "ShardWriter", "backend_names", "get_backend",
           "register_backend"]

_KNOWN: dict[str, str] = {"hdf5": "packer.format.backends.hdf5", "lmdb": "packer.format.backends.lmdb"}
_LOADED: dict[str, Backend] = {}


def backend_names() -> tuple[str, ...]:
    """Sorted names of every registered backend."""
    return tuple(sorted(set(_KNOWN) | set(_LOADED)))


def get_backend(name: str) -> Backend:
    """Return the backend registered as ``name``, importing its module on first use.

    Raises:
        UnknownNameError: no backend of that name; the message lists the choices.
    """
    if name not in _LOADED:
        if name not in _KNOWN:
            raise UnknownNameError(f"Unknown backend {name!r}; available: {', '.join(backend_names())}")
        module = importlib.import_module(_KNOWN[name])
        _LOADED[name] = module.BACKEND
    return _LOADED[name]


def register_backend(backend: Backend, *, replace: bool = False) -> None:
    """Add a backend under ``backend.name`` (for plugins and tests).

    Raises:
        ValueError: the name is taken and ``replace`` is off.
    """
    if not replace and backend.name in backend_names():
        raise ValueError(f"backend {backend.name!r} is already registered")
    _LOADED[backend.name] = backend
