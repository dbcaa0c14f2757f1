"""One name -> implementation registry, shared by stores, backends, codecs and engines.

Modelled on fsspec's ``registry.py``: built-in names map to an import path (``"module:attr"``),
imported on first use so ``import packer`` stays light, plus the extra to install when that
import fails; plugins register objects directly, or declare an entry point in the registry's
group (``packer.backends``, ...), which every process finds, spawned workers included. An
unknown name lists the choices; a missing optional dependency names the ``pip install`` line that
brings it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from packer.errors import MissingExtraError, UnknownNameError

__all__ = ["Lazy", "Registry"]

T = TypeVar("T")
_log = logging.getLogger(__name__)

#: The distribution users install (``pip install packer-shards[extra]``).
_DISTRIBUTION = "packer-shards"


@dataclass(frozen=True)
class Lazy:
    """A built-in implementation not imported yet: ``"module:attr"`` and the extra it needs."""

    target: str
    extra: str | None = None


class Registry(Generic[T]):
    """Names of one kind of implementation (``kind``: "backend", "codec", ...).

    Args:
        kind: What the names name, for messages.
        builtins: Name -> :class:`Lazy` (or a plain ``"module:attr"`` text).
        hint: A sentence added to the unknown-name error (say, how to get newer names).
        entry_points: The entry-point group installed plugins declare their names in
            (``[project.entry-points."packer.backends"] mine = "my_pkg.backend:BACKEND"``); read
            when the names are listed or a name is not otherwise known. A built-in or registered
            name wins over one.
    """

    def __init__(self, kind: str, builtins: Mapping[str, Lazy | str] | None = None, *,
                 hint: str = "", entry_points: str | None = None) -> None:
        self.kind = kind
        self.hint = hint
        self.entry_points = entry_points
        self._lazy: dict[str, Lazy] = {name: Lazy(spec) if isinstance(spec, str) else spec
                                       for name, spec in (builtins or {}).items()}
        self._loaded: dict[str, T] = {}  # built-ins and entry points, once imported
        self._registered: dict[str, T] = {}  # register()'s, over a built-in of the same name
        self._discovered = entry_points is None

    def _discover(self) -> None:
        """Add the names installed plugins declare in the entry-point group (once)."""
        if self._discovered:
            return
        self._discovered = True
        for point in importlib.metadata.entry_points(group=self.entry_points or ""):
            if point.name in self._lazy or point.name in self._registered:
                _log.debug("%s %r from %s is shadowed by a built-in or registered one",
                           self.kind, point.name, point.value)
                continue
            self._lazy[point.name] = Lazy(f"{point.module}:{point.attr}")

    def names(self, *, sort: bool = True) -> tuple[str, ...]:
        """Names of every registered implementation: sorted, or built-ins first in their order."""
        self._discover()
        names = dict.fromkeys([*self._lazy, *self._registered])
        return tuple(sorted(names) if sort else names)

    def __contains__(self, name: object) -> bool:
        if name in self._lazy or name in self._registered:
            return True
        self._discover()
        return name in self._lazy

    def get(self, name: str) -> T:
        """The implementation registered as ``name``, importing it on first use.

        Raises:
            UnknownNameError: no such name; the message lists the choices.
            MissingExtraError: its optional dependency is not installed; names the extra.
        """
        if name in self._registered:
            return self._registered[name]
        if name in self._loaded:
            return self._loaded[name]
        spec = self._lazy.get(name)
        if spec is None:  # only a miss pays for reading the entry points (a worker's start-up)
            self._discover()
            spec = self._lazy.get(name)
        if spec is None:
            hint = f". {self.hint}" if self.hint else ""
            raise UnknownNameError(f"Unknown {self.kind} {name!r}; available: "
                                   f"{', '.join(self.names())}{hint}")
        module_name, _, attribute = spec.target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            if spec.extra is None:
                raise
            raise MissingExtraError(
                f"The {self.kind} {name!r} needs the optional dependency {err.name or err}: "
                f"pip install '{_DISTRIBUTION}[{spec.extra}]'") from err
        value: T = getattr(module, attribute)
        self._loaded[name] = value
        return value

    def extra_of(self, name: str) -> str | None:
        """The extra a built-in name needs (None: none, not a built-in, or registered over one)."""
        spec = None if name in self._registered else self._lazy.get(name)
        return None if spec is None else spec.extra

    def register(self, name: str, value: T, *, replace: bool = False) -> None:
        """Add ``value`` under ``name`` (for plugins and tests); with ``replace``, over a built-in
        or registered one, which :meth:`unregister` brings back (a built-in) or removes.

        Raises:
            ValueError: the name is taken and ``replace`` is off.
        """
        if not replace and name in self:
            raise ValueError(f"a {self.kind} named {name!r} is already registered "
                             "(pass replace=True to replace it)")
        self._registered[name] = value

    def unregister(self, name: str) -> None:
        """Remove a name registered with :meth:`register` (a plugin's teardown): a built-in it
        replaced answers to its name again. Built-ins stay: for one never replaced (or a name
        not registered) this does nothing."""
        self._registered.pop(name, None)
