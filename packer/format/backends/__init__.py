"""The storage backend registry: a name (the value of ``--to``) maps to a :class:`Backend`.

Backend modules are imported on first use, so ``import packer`` stays light.
"""

from __future__ import annotations

from packer.format.backends.base import Backend, ShardReader, ShardWriter
from packer.registry import Registry

__all__ = ["BACKENDS", "Backend", "ShardReader", "ShardWriter", "backend_names", "get_backend",
           "register_backend"]

BACKENDS: Registry[Backend] = Registry("backend", entry_points="packer.backends", builtins={
    "hdf5": "packer.format.backends.hdf5:BACKEND",
    "lmdb": "packer.format.backends.lmdb:BACKEND",
})


def backend_names() -> tuple[str, ...]:
    """Sorted names of every registered backend."""
    return BACKENDS.names()


def get_backend(name: str) -> Backend:
    """Return the backend registered as ``name``, importing its module on first use.

    Raises:
        UnknownNameError: no backend of that name; the message lists the choices.
    """
    return BACKENDS.get(name)


def register_backend(backend: Backend, *, replace: bool = False) -> None:
    """Add a backend under ``backend.name`` (for plugins and tests).

    Raises:
        ValueError: the name is taken and ``replace`` is off.
    """
    BACKENDS.register(backend.name, backend, replace=replace)
