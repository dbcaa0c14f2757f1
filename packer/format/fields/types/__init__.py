"""The built-in field types, by family: images (``image``, ``mask``), targets (``label``,
``labels``, ``boxes``, ``box_labels``), outlines (``polygons``) and plain values (``text``,
``json``, ``ndarray``, ``bytes``, ``int``, ``float``). :data:`BUILTIN_TYPES` maps each name to its
class (the registry's start)."""

from __future__ import annotations

from typing import Final

from packer.format.fields.base import FieldType
from packer.format.fields.types.images import ImageType, MaskType
from packer.format.fields.types.outlines import PolygonsType
from packer.format.fields.types.targets import BoxesType, BoxLabelsType, LabelsType, LabelType
from packer.format.fields.types.values import BytesType, FloatType, IntType, JsonType, NdarrayType, TextType

__all__ = ["BUILTIN_TYPES", "BoxLabelsType", "BoxesType", "BytesType", "FloatType", "ImageType", "IntType",
           "JsonType", "LabelType", "LabelsType", "MaskType", "NdarrayType", "PolygonsType", "TextType"]

#: Each built-in type's name -> its class.
BUILTIN_TYPES: Final[dict[str, type[FieldType]]] = {
    kind.name: kind for kind in (ImageType, MaskType, LabelType, LabelsType, BoxesType, BoxLabelsType,
                                 PolygonsType, TextType, JsonType, NdarrayType, BytesType, IntType, FloatType)
}
