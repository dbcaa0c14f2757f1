"""Public names of a package, imported from their modules on first use (PEP 562).

``import packer`` (or ``packer.conversion``) then costs almost nothing, the command line starts
without torch, and each name still lives in exactly one module: the package only says where.
:func:`optional_module` imports an optional dependency when a feature first needs it.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from packer.errors import MissingExtraError

__all__ = ["lazy_exports", "optional_module"]


def optional_module(name: str, *, needed_by: str, install: str) -> ModuleType:
    """The module ``name``, imported now (``needed_by`` names the feature that needs it).

    Raises:
        MissingExtraError: it cannot be imported; the message says to run ``pip install``
            ``install`` and why the import failed.
    """
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise MissingExtraError(f"{needed_by} needs {name.split('.')[0]}: pip install {install} "
                                f"({type(err).__name__}: {err})") from None


def lazy_exports(package: str, homes: Mapping[str, Sequence[str]], exported: Sequence[str], *,
                 deprecated: Mapping[str, tuple[str, str]] | None = None,
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, from ``{module: [names]}``.

    ``module`` is relative to ``package`` (``".run"``) or absolute. A name is imported the
    first time it is asked for and then cached in the package's namespace. ``exported`` is the
    package's ``__all__`` (a literal list, for type checkers and documentation tools); it must
    name exactly the names of ``homes``. ``deprecated`` maps names the package no longer exports
    to ``(module, advice)``: they still resolve, with a ``DeprecationWarning`` at each use,
    and are left out of ``__all__`` and ``dir()``.
    """
    where: dict[str, str] = {}
    for module, names in homes.items():
        absolute = package + module if module.startswith(".") else module
        for name in names:
            if name in where:
                raise ImportError(f"{package}: {name!r} is exported from two modules")
            where[name] = absolute
    if sorted(where) != sorted(exported):
        raise ImportError(f"{package}: __all__ and the lazily exported names differ: "
                          f"{sorted(set(where) ^ set(exported))}")
    retired = dict(deprecated or {})
    if set(retired) & set(where):
        raise ImportError(f"{package}: exported and deprecated at once: {sorted(set(retired) & set(where))}")

    def __getattr__(name: str) -> Any:
        if name in retired:
            module, advice = retired[name]
            module = package + module if module.startswith(".") else module
            warnings.warn(f"'{package}.{name}' is deprecated and will be removed in packer 0.4: "
                          f"{advice}", DeprecationWarning, stacklevel=2)
            return getattr(importlib.import_module(module), name)
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name]), name)
        setattr(importlib.import_module(package), name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(importlib.import_module(package))) | set(exported))

    return __getattr__, __dir__
