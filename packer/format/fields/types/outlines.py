"""``polygons``: each box's outline, tied to a boxes field: COCO's ``segmentation`` (polygons, or an
RLE for a crowd) or a YOLO segment (one flat polygon).

A value has one entry per box of the ``boxes`` field, in box order, each one of

- ``None`` or ``[]``: no outline;
- a ring ``[x1, y1, x2, y2, ...]`` (YOLO's form: an even count of numbers);
- a list of rings (COCO's form: a polygon in several parts);
- an RLE ``{"size": [height, width], "counts": ...}`` (COCO's crowds; not with ``normalized``).

Coordinates are in the pixels of the boxes' image, or ``normalized`` to [0, 1]. Values are kept
as given (a ring a little past the image is not clipped: pycocotools clips when it draws), and
stored as canonical JSON, byte for byte as a ``json`` field would store them. What the type adds
over ``json`` is meaning: the joint transforms move each outline with its box
(:mod:`packer.read.joint.outlines`), and a value that is none of the forms, or whose entries do
not match the boxes' count, is a skip with its reason before anything is written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, Final

from packer.format.fields.base import FieldType, FieldValueError
from packer.format.fields.types.targets import BOX_COUNT
from packer.format.fields.types.values import (
    INVALID_VALUE,
    JsonType,
    field_name,
    flag,
    known,
    positive_int,
)

__all__ = ["PolygonsType", "is_rle", "is_ring"]

_MIB: Final = 1 << 20


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_ring(value: Any) -> bool:
    """Whether ``value`` is one flat ring: a non-empty list of an even count of finite numbers."""
    return isinstance(value, list | tuple) and bool(value) and len(value) % 2 == 0 \
        and all(_number(v) for v in value)


def is_rle(value: Any) -> bool:
    """Whether ``value`` is a COCO RLE: ``size`` two non-negative ints, ``counts`` a str or ints."""
    if not isinstance(value, Mapping) or set(value) != {"size", "counts"}:
        return False
    size, counts = value["size"], value["counts"]
    sized = isinstance(size, list | tuple) and len(size) == 2 and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in size)
    return sized and (isinstance(counts, str) or (isinstance(counts, list | tuple) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts)))


def _entry_problem(entry: Any, normalized: bool) -> str | None:
    """Why ``entry`` is none of the outline forms (None when it is one)."""
    if entry is None or (isinstance(entry, list | tuple) and not entry) or is_ring(entry):
        return None
    if isinstance(entry, list | tuple):
        bad = next((ring for ring in entry if not is_ring(ring)), None)
        return None if bad is None else f"the ring {str(bad)[:60]} is not an even count of finite numbers"
    if is_rle(entry):
        return "an RLE cannot be normalized (it is in pixels)" if normalized else None
    return (f"{type(entry).__name__} {str(entry)[:60]} is neither a ring of x, y numbers, a list of rings, "
            "nor an RLE {'size': [h, w], 'counts': ...}")


class PolygonsType(FieldType):
    """Each box's outline (see the module docstring), tied to the ``boxes`` field; in pixels, or
    ``normalized`` to [0, 1]; canonical JSON of at most ``max_bytes`` (16 MiB) a sample."""

    name: ClassVar[str] = "polygons"
    refers_to: ClassVar[Mapping[str, str]] = {"boxes": "boxes"}

    def in_image_pixels(self, params: Mapping[str, Any]) -> bool:
        return not params["normalized"]

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        known(params, ("boxes", "normalized", "max_bytes"))
        return {"boxes": field_name(params, "boxes"), "normalized": flag(params, "normalized", False),
                "max_bytes": positive_int(params, "max_bytes", 16 * _MIB)}

    def encode(self, value: Any, params: Mapping[str, Any], *, context: Mapping[str, Any]) -> bytes:
        if value is None:
            value = []
        if not isinstance(value, list | tuple):
            raise FieldValueError(INVALID_VALUE, f"polygons must be a list with one outline per box, not "
                                                 f"{type(value).__name__}")
        count = context.get(f"{params['boxes']}.count")
        if count is None:
            raise FieldValueError(BOX_COUNT, f"the boxes field {params['boxes']!r} gave no box count")
        if len(value) != count:
            raise FieldValueError(BOX_COUNT, f"{len(value)} outlines for {count} boxes")
        for number, entry in enumerate(value):
            problem = _entry_problem(entry, params["normalized"])
            if problem is not None:
                raise FieldValueError(INVALID_VALUE, f"box {number}'s outline: {problem}")
        return JsonType().encode(list(value), {"max_bytes": params["max_bytes"]}, context=context)

    def decode(self, payload: bytes | memoryview, params: Mapping[str, Any]) -> list[Any]:
        value = JsonType().decode(payload, {"max_bytes": params["max_bytes"]})
        if not isinstance(value, list):
            raise ValueError(f"polygons record holds a {type(value).__name__}, not a list of outlines")
        return value
