"""The codec registry: a name (the value of ``--codec``, recorded in each manifest) maps to a
:class:`~packer.format.codecs.base.Codec` class. Built in: ``original``, ``jpeg``, ``pixels``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packer.errors import UnknownNameError
from packer.format.codecs.base import Codec
from packer.format.codecs.jpeg import JpegCodec
from packer.format.codecs.original import OriginalCodec
from packer.format.codecs.pixels import PixelsCodec
from packer.registry import Registry

__all__ = ["CODECS", "codec_class", "codec_names", "get_codec", "register_codec"]

CODECS: Registry[type[Codec]] = Registry(
    "codec", entry_points="packer.codecs",
    hint="A dataset written by a newer packer may need an upgrade (pip install -U packer-shards).")
for _builtin in (OriginalCodec, JpegCodec, PixelsCodec):
    CODECS.register(_builtin.name, _builtin)


def register_codec(codec: type[Codec], *, replace: bool = False) -> None:
    """Make ``codec`` (a :class:`Codec` subclass) available under ``codec.name``.

    Raises:
        ValueError: the name is taken and ``replace`` is false, or ``codec`` is not a Codec class.
    """
    if not (isinstance(codec, type) and issubclass(codec, Codec)):
        raise ValueError(f"register_codec needs a Codec subclass, not {codec!r}")
    CODECS.register(codec.name, codec, replace=replace)


def codec_names() -> tuple[str, ...]:
    """Sorted names of the registered codecs (the CLI's ``--codec`` choices)."""
    return CODECS.names()


def codec_class(name: str) -> type[Codec]:
    """The codec class registered as ``name``, to ask it questions before building one.

    Raises:
        UnknownNameError: no codec of that name; the message lists the choices.
    """
    return CODECS.get(name)


def get_codec(name: str, params: Mapping[str, Any] | None = None) -> Codec:
    """Build the codec registered as ``name`` from ``params`` (as recorded in a manifest, or
    the options of ``--codec``: ``quality``, ``resize``); missing ones take their defaults.

    Raises:
        UnknownNameError: no codec of that name (the message lists the choices), or parameters
            this packer cannot honour.
    """
    cls = codec_class(name)
    try:
        codec = cls.from_params(params or {})
    except (TypeError, ValueError) as err:
        raise UnknownNameError(f"Codec {name!r} cannot take {dict(params or {})}: {err}") from err
    unknown = set(params or {}) - set(codec.params())
    if unknown:
        raise UnknownNameError(f"Codec {name!r} has no option {', '.join(sorted(unknown))}; it "
                               f"takes {', '.join(sorted(codec.params()))}.")
    return codec
