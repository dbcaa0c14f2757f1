"""The schema a conversion writes: the source's fields, with the conversion's own choices filled in.

A source names its fields (:attr:`packer.source.base.SourceIndex.schema`); how images are stored
is the conversion's choice, so every ``image`` field takes the conversion's codec, check and
pixel bound, and the class ``label`` takes the classes the scan found. An ImageFolder-like
source (no schema) gets None: its datasets are written exactly as before fields existed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from packer.conversion.options import ConversionOptions
from packer.errors import SchemaError, SourceError
from packer.format.fields.schema import Field, Schema
from packer.source.base import SourceIndex

__all__ = ["conversion_schema", "stored_schema"]


def conversion_schema(index: SourceIndex, options: ConversionOptions) -> Schema | None:
    """The checked schema of the conversion of ``index`` with ``options``, or None for
    ImageFolder's ``{image, label}``.

    Raises:
        SourceError: the source's schema is not valid (a source's bug, a bad ``--field``, or a
            codec that resizes images that masks or boxes are measured on); the message is the
            schema's.
    """
    if not index.schema:
        return None
    try:
        return stored_schema(index.schema, options, classes=index.classes)
    except SchemaError as err:
        raise SourceError(f"{index.root!r}: its fields do not make a schema: {err} (nothing was "
                          "written)") from err


def stored_schema(fields: Sequence[Mapping[str, Any]], options: ConversionOptions, *,
                  classes: Sequence[str] | None = None) -> Schema:
    """``fields`` as the conversion stores them: every image field with the conversion's codec,
    check and pixel bound, the class ``label`` with ``classes`` (when given).

    Raises:
        SchemaError: the fields do not make a schema with these options.
    """
    codec = options.stored_as
    bound: list[Field] = []
    for spec in fields:
        params: dict[str, Any] = dict(spec.get("params") or {})
        if spec.get("type") == "image":
            params.update(codec=codec.name, codec_params=codec.params(), check=options.check,
                          max_pixels=options.max_pixels)
        elif spec.get("type") == "label" and classes is not None:
            params["classes"] = list(classes)
        bound.append(Field(str(spec.get("name")), str(spec.get("type")), params))
    return Schema.of(bound)
