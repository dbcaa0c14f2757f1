"""One line per field of a sample, for people (``packer show`` on a dataset with fields).

A mask is described by its size, dtype and the classes it holds; boxes by their count and the
first few; text and JSON cut to a line. Values come decoded from
:func:`packer.format.fields.stored.stored_decoder`; names and text from data are returned as
they are (the CLI escapes what reaches the terminal).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from packer.format.fields.schema import Field, Schema

__all__ = ["describe_fields", "describe_value"]

#: The most characters of a value's description.
WIDTH = 100
#: The most boxes (or list entries) shown one by one.
SHOWN = 3


def _cut(text: str) -> str:
    return text if len(text) <= WIDTH else text[:WIDTH - 3] + "..."


def _numbers(values: Any, shown: int = SHOWN) -> str:
    flat = np.asarray(values).tolist()
    listed = ", ".join(json.dumps(v) for v in flat[:shown])
    return f"[{listed}{', ...' if len(flat) > shown else ''}]"


def describe_value(field: Field, value: Any) -> str:
    """A short description of one decoded value of ``field``."""
    kind = field.type
    if kind == "image":
        width, height = value.size
        return f"image {width}x{height} {value.mode}"
    if kind == "mask":
        array = np.asarray(value)
        present = np.unique(array)
        return _cut(f"{array.shape[1]}x{array.shape[0]} {array.dtype}, values {_numbers(present)}")
    if kind == "boxes":
        array = np.asarray(value).reshape(-1, 4)
        rows = "; ".join(_numbers(np.round(row, 2), 4) for row in array[:SHOWN])
        more = f"; and {len(array) - SHOWN} more" if len(array) > SHOWN else ""
        if not len(array):
            return "no boxes"
        return _cut(f"{len(array)} box(es), {field.params.get('format', 'xyxy')}: {rows}{more}")
    if kind in ("labels", "box_labels"):
        classes = field.params.get("classes") or ()
        indices = [int(i) for i in np.asarray(value).reshape(-1)]
        named = [classes[i] if 0 <= i < len(classes) else str(i) for i in indices[:SHOWN]]
        if not indices:
            return "none"
        return _cut(f"{len(indices)}: {', '.join(named)}{', ...' if len(indices) > SHOWN else ''}")
    if kind == "ndarray":
        array = np.asarray(value)
        return _cut(f"array {list(array.shape)} {array.dtype}: {_numbers(array.reshape(-1))}")
    if kind == "text":
        return _cut(repr(value))
    if kind == "polygons":
        entries = list(value or [])
        drawn = sum(1 for e in entries if e)
        crowds = sum(1 for e in entries if isinstance(e, Mapping))
        return f"{len(entries)} outline(s), {drawn} drawn" + (f", {crowds} as RLE" if crowds else "")
    if kind == "json":
        return _cut(json.dumps(value, sort_keys=True, ensure_ascii=False))
    if kind == "bytes":
        return f"{len(value)} bytes"
    return _cut(repr(value))


def describe_fields(schema: Schema, values: Mapping[str, Any]) -> dict[str, str]:
    """``{field name: description}`` of a sample's decoded in-record values, in schema order."""
    return {f.name: f"{f.type}: {describe_value(f, values[f.name])}" for f in schema if f.name in values}
