"""Make the implementation under test available by name for the length of a test.

A contract class names one implementation (a backend, a codec class, an engine opener, a store
class, a source class). Built-ins are registered already; a plugin's may be too, at import of
its package. Anything else is registered here for the test and removed afterwards, so a
plugin's test suite runs without touching the registries for good.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from packer.registry import Registry

__all__ = ["registered"]

T = TypeVar("T")


@contextmanager
def registered(registry: Registry[T], name: str, value: T | None,
               register: Callable[[T], None]) -> Iterator[bool]:
    """Make ``name`` resolve to ``value`` in ``registry`` for the block.

    ``register(value)`` adds it (the kind's public register function, called as a plugin
    author would); ``value`` None means "whatever is registered under ``name``". Yields
    whether this call registered it (and so removes it at the end).

    Raises:
        ValueError: ``name`` is registered to another implementation, or not at all while
            ``value`` is None.
    """
    if name in registry:
        current = registry.get(name)
        if value is not None and current is not value and current != value:
            raise ValueError(f"The {registry.kind} {name!r} under test is registered to "
                             f"{current!r}, not to {value!r}: give the implementation another "
                             "name, or test the registered one.")
        yield False
        return
    if value is None:
        raise ValueError(f"No {registry.kind} is registered as {name!r}, and the contract class "
                         "names no implementation to register: set it on the class.")
    register(value)
    try:
        yield True
    finally:
        registry.unregister(name)
