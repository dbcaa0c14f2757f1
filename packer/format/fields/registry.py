"""The field type registry: a type name (recorded in each manifest's schema) maps to a
:class:`~packer.format.fields.base.FieldType` class, imported on first use. Built in: the types of
:mod:`packer.format.fields.types`; a plugin adds one with :func:`register_field_type` or the
``packer.fields`` entry-point group."""

from __future__ import annotations

from functools import lru_cache
from typing import Final

from packer.format.fields.base import FieldType
from packer.registry import Registry

__all__ = ["FIELD_TYPES", "field_type", "field_type_names", "register_field_type"]

_TYPES: Final = "packer.format.fields.types"
FIELD_TYPES: Registry[type[FieldType]] = Registry(
    "field type",
    {
        "image": f"{_TYPES}.images:ImageType", "mask": f"{_TYPES}.images:MaskType",
        "label": f"{_TYPES}.targets:LabelType", "labels": f"{_TYPES}.targets:LabelsType",
        "boxes": f"{_TYPES}.targets:BoxesType", "box_labels": f"{_TYPES}.targets:BoxLabelsType",
        "polygons": f"{_TYPES}.outlines:PolygonsType",
        "text": f"{_TYPES}.values:TextType", "json": f"{_TYPES}.values:JsonType",
        "ndarray": f"{_TYPES}.values:NdarrayType", "bytes": f"{_TYPES}.values:BytesType",
        "int": f"{_TYPES}.values:IntType", "float": f"{_TYPES}.values:FloatType",
    },
    entry_points="packer.fields",
    hint="A dataset written by a newer packer may need an upgrade (pip install -U packer-shards).")


def register_field_type(kind: type[FieldType], *, replace: bool = False) -> None:
    """Make ``kind`` (a :class:`FieldType` subclass) available under ``kind.name``.

    Raises:
        ValueError: the name is taken and ``replace`` is false, or ``kind`` is not a FieldType class.
    """
    if not (isinstance(kind, type) and issubclass(kind, FieldType)):
        raise ValueError(f"register_field_type needs a FieldType subclass, not {kind!r}")
    FIELD_TYPES.register(kind.name, kind, replace=replace)
    _instance.cache_clear()


def field_type(name: str) -> FieldType:
    """The field type registered as ``name`` (one stateless instance per class).

    Raises:
        UnknownNameError: no such type; the message lists the choices.
    """
    return _instance(FIELD_TYPES.get(name))


@lru_cache(maxsize=None)
def _instance(kind: type[FieldType]) -> FieldType:
    return kind()


def field_type_names() -> tuple[str, ...]:
    """Sorted names of the registered field types."""
    return FIELD_TYPES.names()
