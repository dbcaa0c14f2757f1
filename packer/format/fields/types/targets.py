"""Target fields: ``label`` (the class index), ``labels`` (multi-label), ``boxes`` and their
per-box ``box_labels``.

Stored forms (little-endian): ``label`` int64 (it lives in the sample index's targets array, so
records never hold it); ``labels`` int32 indices, distinct and sorted; ``boxes`` float32
``[N, 4]`` in the field's ``format`` (N from the length: 16 bytes a box); ``box_labels`` int32,
one per box, in box order. A class index out of range is a ``missing_label`` skip, as a source's
out-of-range label is (:data:`packer.source.statuses.LABEL_OUT_OF_RANGE`). Without ``classes``
(an empty list: names unknown) an index need only be non-negative.

Boxes: a box outside its image is clipped to it (``clip=True``, the default: only coordinates
move) or makes the sample a ``box_outside`` skip (``clip=False``). A box with no area (after
clipping, in the float32 values stored) makes the sample a ``degenerate_box`` skip: dropping the
box alone would leave its ``box_labels`` (another field) one too many, so nothing is dropped.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, ClassVar, Final

import numpy as np

from packer.format.fields.base import FieldType, FieldValueError
from packer.format.fields.types.images import image_size
from packer.format.fields.types.values import (
    INVALID_VALUE,
    choice,
    class_names,
    exact_int,
    field_name,
    flag,
    known,
)

__all__ = ["BOX_FORMATS", "BoxLabelsType", "BoxesType", "LabelType", "LabelsType", "as_xyxy"]

#: A class index out of range (the reason sources give an out-of-range label).
OUT_OF_RANGE: Final = "missing_label"
#: A box outside its image, with ``clip=False``.
BOX_OUTSIDE: Final = "box_outside"
#: A box with zero or negative area.
DEGENERATE_BOX: Final = "degenerate_box"
#: A ``box_labels`` value whose length is not its boxes' count.
BOX_COUNT: Final = "box_count"
#: Box coordinate formats: corners, corner and size, centre and size.
BOX_FORMATS: Final = ("xyxy", "xywh", "cxcywh")
_I64: Final = struct.Struct("<q")
_INT32_END: Final = 1 << 31


def _bound(classes: list[str], end: int) -> int:
    """One past the largest index allowed: the class count, or ``end`` (the storage's) without names."""
    return len(classes) if classes else end


def _index_array(value: Any, classes: list[str], what: str) -> np.ndarray:
    """``value`` (a sequence or 1-D array of ints) as int64, each a class index."""
    if isinstance(value, str | bytes | Mapping):
        raise FieldValueError(INVALID_VALUE, f"{what} must be a sequence of integers, not "
                                             f"{type(value).__name__}")
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise FieldValueError(INVALID_VALUE, f"{what} must be a sequence of integers: {err}") from None
    if array.size == 0 and array.ndim == 1:
        return np.zeros(0, dtype=np.int64)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise FieldValueError(INVALID_VALUE, f"{what} must be a sequence of integers, not "
                                             f"{array.ndim}-D {array.dtype}")
    low, high, end = int(array.min()), int(array.max()), _bound(classes, _INT32_END)
    if low < 0 or high >= end:
        raise FieldValueError(OUT_OF_RANGE, f"{what} {low if low < 0 else high} is no class index "
                                            f"(0 to {end - 1})")
    return array.astype(np.int64)


def _stored_indices(payload: bytes | memoryview, classes: list[str], what: str) -> np.ndarray:
    """The int32 indices of a record, as int64, checked against ``classes``."""
    if len(payload) % 4:
        raise ValueError(f"{what} record of {len(payload)} bytes is not whole int32 values")
    indices = np.frombuffer(payload, dtype="<i4").astype(np.int64)
    if indices.size and (indices.min() < 0 or indices.max() >= _bound(classes, _INT32_END)):
        raise ValueError(f"{what} record holds an index out of range")
    return indices


class LabelType(FieldType):
    """The class index of a sample, with the class names; kept in the sample index's targets."""

    name: ClassVar[str] = "label"
    in_record: ClassVar[bool] = False

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        known(params, ("classes",))
        return {"classes": class_names(params)}

    def encode(self, value: Any, params: Mapping[str, Any], *, context: Mapping[str, Any]) -> bytes:
        index, end = exact_int(value, "a label"), _bound(params["classes"], 1 << 63)
        if not 0 <= index < end:
            raise FieldValueError(OUT_OF_RANGE, f"label {index} is no class index (0 to {end - 1})")
        return _I64.pack(index)

    def decode(self, payload: bytes | memoryview, params: Mapping[str, Any]) -> int:
        if len(payload) != _I64.size:
            raise ValueError(f"label record of {len(payload)} bytes, not 8")
        (index,) = _I64.unpack(payload)
        if not 0 <= index < _bound(params["classes"], 1 << 63):
            raise ValueError(f"label record holds {index}, no class index")
        return int(index)


class LabelsType(FieldType):
    """Several class indices (multi-label); stored distinct and sorted, read as an int64 array."""

    name: ClassVar[str] = "labels"

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        known(params, ("classes",))
        return {"classes": class_names(params)}

    def encode(self, value: Any, params: Mapping[str, Any], *, context: Mapping[str, Any]) -> bytes:
        indices = np.unique(_index_array(value, params["classes"], "labels"))
        return indices.astype("<i4").tobytes()

    def decode(self, payload: bytes | memoryview, params: Mapping[str, Any]) -> np.ndarray:
        indices = _stored_indices(payload, params["classes"], "labels")
        if indices.size > 1 and not (np.diff(indices) > 0).all():
            raise ValueError("labels record is not sorted and distinct")
        return indices


def as_xyxy(boxes: np.ndarray, fmt: str) -> np.ndarray:
    """``boxes`` (float64 ``[N, 4]`` in ``fmt``) as corners."""
    a, b, c, d = boxes.T
    if fmt == "xywh":
        return np.stack([a, b, a + c, b + d], axis=1)
    if fmt == "cxcywh":
        return np.stack([a - c / 2, b - d / 2, a + c / 2, b + d / 2], axis=1)
    return boxes.copy()


def _from_xyxy(corners: np.ndarray, fmt: str) -> np.ndarray:
    """Corners back in ``fmt``."""
    x1, y1, x2, y2 = corners.T
    if fmt == "xywh":
        return np.stack([x1, y1, x2 - x1, y2 - y1], axis=1)
    if fmt == "cxcywh":
        return np.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], axis=1)
    return corners.copy()


def _box_array(value: Any) -> np.ndarray:
    """``value`` (array-like ``[N, 4]`` of finite numbers, N may be 0) as float32."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise FieldValueError(INVALID_VALUE, f"boxes must be an [N, 4] array: {err}") from None
    if array.size == 0 and array.ndim in (1, 2):
        return np.zeros((0, 4), dtype=np.float32)
    if array.ndim != 2 or array.shape[1] != 4 or array.dtype.kind not in "iuf":
        raise FieldValueError(INVALID_VALUE, f"boxes must be an [N, 4] array of numbers, not "
                                             f"{list(array.shape)} {array.dtype}")
    with np.errstate(over="ignore"):
        boxes = array.astype(np.float32)
    if not np.isfinite(boxes).all():
        raise FieldValueError(INVALID_VALUE, "boxes hold a coordinate that is not a finite float32")
    return boxes


class BoxesType(FieldType):
    """Boxes on the ``image`` field, float32 ``[N, 4]`` in ``format`` (xyxy, xywh, cxcywh), in
    pixels or ``normalized`` to [0, 1]; see the module docstring for ``clip`` and empty boxes."""

    name: ClassVar[str] = "boxes"
    refers_to: ClassVar[Mapping[str, str]] = {"image": "image"}

    def in_image_pixels(self, params: Mapping[str, Any]) -> bool:
        return not params["normalized"]

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        known(params, ("image", "format", "normalized", "clip"))
        return {"image": field_name(params, "image"), "format": choice(params, "format", BOX_FORMATS, "xyxy"),
                "normalized": flag(params, "normalized", False), "clip": flag(params, "clip", True)}

    def encode(self, value: Any, params: Mapping[str, Any], *, context: Mapping[str, Any]) -> bytes:
        boxes, fmt = _box_array(value), params["format"]
        width, height = (1, 1) if params["normalized"] else image_size(context, params["image"])
        corners = as_xyxy(boxes.astype(np.float64), fmt)
        outside = (corners[:, :2] < 0).any(axis=1) | (corners[:, 2] > width) | (corners[:, 3] > height)
        if outside.any():
            first = int(np.flatnonzero(outside)[0])
            if not params["clip"]:
                raise FieldValueError(BOX_OUTSIDE, f"box {first} {boxes[first].tolist()} ({fmt}) is outside "
                                                   f"the image's {width}x{height}")
            clipped = corners[outside].clip(0, [width, height, width, height])
            boxes[outside] = _from_xyxy(clipped, fmt).astype(np.float32)
            corners = as_xyxy(boxes.astype(np.float64), fmt)
        empty = (corners[:, 2] <= corners[:, 0]) | (corners[:, 3] <= corners[:, 1])
        if empty.any():
            first = int(np.flatnonzero(empty)[0])
            raise FieldValueError(DEGENERATE_BOX, f"box {first} {boxes[first].tolist()} ({fmt}) has no area"
                                                  f"{' inside the image' if outside[first] else ''}")
        return boxes.astype("<f4").tobytes()

    def decode(self, payload: bytes | memoryview, params: Mapping[str, Any]) -> np.ndarray:
        if len(payload) % 16:
            raise ValueError(f"boxes record of {len(payload)} bytes is not whole boxes (16 bytes each)")
        boxes = np.frombuffer(payload, dtype="<f4").reshape(-1, 4).astype(np.float32)
        if not np.isfinite(boxes).all():
            raise ValueError("boxes record holds a coordinate that is not finite")
        return boxes

    def context_of(self, name: str, value: Any, payload: bytes, params: Mapping[str, Any]) -> dict[str, Any]:
        """The box count, which the ``box_labels`` of these boxes must match."""
        return {f"{name}.count": len(payload) // 16}


class BoxLabelsType(FieldType):
    """The class index of each box of the ``boxes`` field, in box order; read as int64."""

    name: ClassVar[str] = "box_labels"
    refers_to: ClassVar[Mapping[str, str]] = {"boxes": "boxes"}

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        known(params, ("boxes", "classes"))
        return {"boxes": field_name(params, "boxes"), "classes": class_names(params)}

    def encode(self, value: Any, params: Mapping[str, Any], *, context: Mapping[str, Any]) -> bytes:
        indices = _index_array(value, params["classes"], "box label")
        count = context.get(f"{params['boxes']}.count")
        if count is None:
            raise FieldValueError(BOX_COUNT, f"the boxes field {params['boxes']!r} gave no box count")
        if len(indices) != count:
            raise FieldValueError(BOX_COUNT, f"{len(indices)} box labels for {count} boxes")
        return indices.astype("<i4").tobytes()

    def decode(self, payload: bytes | memoryview, params: Mapping[str, Any]) -> np.ndarray:
        return _stored_indices(payload, params["classes"], "box_labels")
