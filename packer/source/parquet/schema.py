"""What a Parquet image table's schema says: which column holds the images, which the labels,
the class names its Hugging Face metadata gives, and which other columns are kept per sample.

A table as the Hugging Face hub ships it has an ``image`` column of structs ``{bytes: binary,
path: string}``, an integer ``label`` column and, in the schema metadata under ``huggingface``,
the ``datasets`` features as JSON: ``{"info": {"features": {"label": {"_type": "ClassLabel",
"names": [...]}}}}`` (older ``datasets`` put ``features`` at the top level; both are read).
A plain binary column of encoded images works too. Nothing here reads rows.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from packer.errors import SourceError
from packer.source.statuses import (
    EMPTY,
    LABEL_OUT_OF_RANGE,
    LABEL_STATUSES,
    MISSING_IMAGE,
    MISSING_LABEL,
    NEGATIVE_LABEL,
    OK,
    TOO_LARGE,
    UNKNOWN_LABEL_NAME,
)

__all__ = ["EMPTY", "IMAGE_COLUMNS", "LABEL_CODES", "LABEL_COLUMNS", "MAX_NUMBERED_CLASSES",
           "METADATA_TEXT_LIMIT", "MISSING_IMAGE", "NEGATIVE", "NO_LABEL", "OK", "OUT_OF_RANGE",
           "TOO_LARGE", "UNKNOWN_NAME", "TableLayout", "image_suffix", "json_value", "label_targets",
           "table_features", "table_layout"]

#: Column names tried, in order, for the images and for the labels.
IMAGE_COLUMNS: Final = ("image", "img", "jpg", "png", "picture")
LABEL_COLUMNS: Final = ("label", "labels", "class", "target", "category", "fine_label")
#: Integer labels without ClassLabel names make classes ``"0"`` to the largest; no more than this.
MAX_NUMBERED_CLASSES: Final = 1 << 20
#: A text value kept as metadata is cut to this many characters (a note says so).
METADATA_TEXT_LIMIT: Final = 64 * 1024

#: Why a row cannot be a sample (its reader raises the matching skip reason); OK (0): it can.
#: Statuses of the shared table (:mod:`packer.source.statuses`), under the names this module
#: gave them first.
NO_LABEL: Final = MISSING_LABEL
NEGATIVE: Final = NEGATIVE_LABEL
OUT_OF_RANGE: Final = LABEL_OUT_OF_RANGE
UNKNOWN_NAME: Final = UNKNOWN_LABEL_NAME
#: The codes that concern the label (the image itself may be fine).
LABEL_CODES: Final = LABEL_STATUSES

#: Leading bytes of encoded images, for naming rows without a path (``<file>/<row>.jpg``).
_MAGIC: Final = ((b"\xff\xd8\xff", ".jpg"), (b"\x89PNG\r\n\x1a\n", ".png"), (b"GIF87a", ".gif"),
                 (b"GIF89a", ".gif"), (b"BM", ".bmp"), (b"II*\x00", ".tif"), (b"MM\x00*", ".tif"))


@dataclass(frozen=True)
class TableLayout:
    """The columns a conversion reads from a table, and how its labels become classes.

    ``image_field`` is ``"bytes"`` for a struct column (then ``has_path`` says whether it has a
    ``path`` field), None for a binary column. ``label_kind`` is ``"class_label"`` (the table's
    ClassLabel ``class_names`` give the classes), ``"numbers"``, ``"names"`` or ``"none"``.
    """

    image_column: str
    image_field: str | None
    has_path: bool
    label_column: str | None  # None: the rows have no class (a table with fields=)
    label_kind: str
    class_names: tuple[str, ...] | None
    metadata_columns: tuple[str, ...]
    left_out: tuple[str, ...]  # other columns not kept: binary or nested values

    @property
    def image_leaf(self) -> str:
        """The column path that holds the bytes (``image.bytes``, or the binary column)."""
        return self.image_column if self.image_field is None else f"{self.image_column}.{self.image_field}"

    def differs(self, other: TableLayout) -> str | None:
        """What ``other`` (another file's layout) does differently, or None if it matches."""
        if (other.image_field, other.has_path) != (self.image_field, self.has_path):
            return f"its column {self.image_column!r} has another type"
        if other.label_kind != self.label_kind:
            return (f"its labels are {other.label_kind.replace('_', ' ')}, not "
                    f"{self.label_kind.replace('_', ' ')}")
        if other.class_names != self.class_names:
            return "its ClassLabel names differ from the first file's"
        if other.metadata_columns != self.metadata_columns:
            return (f"its other columns {list(other.metadata_columns)} differ from the first file's "
                    f"{list(self.metadata_columns)}")
        return None


def table_features(schema: pa.Schema) -> Mapping[str, Any]:
    """The ``datasets`` features recorded in the schema metadata (``huggingface``), or {}."""
    raw = (schema.metadata or {}).get(b"huggingface")
    if raw is None:
        return {}
    try:
        meta = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(meta, dict):
        return {}
    info = meta.get("info")
    features = info.get("features") if isinstance(info, dict) else None
    if features is None:
        features = meta.get("features")
    return features if isinstance(features, dict) else {}


def _class_names(feature: Any) -> tuple[str, ...] | None:
    """A ClassLabel feature's names (``num_classes`` alone: ``"0"``, ``"1"``, ...), else None."""
    if not isinstance(feature, dict) or feature.get("_type") != "ClassLabel":
        return None
    names = feature.get("names")
    if isinstance(names, list) and names:
        return tuple(str(name) for name in names)
    count = feature.get("num_classes")
    return tuple(str(i) for i in range(count)) if isinstance(count, int) and count > 0 else None


def _fail(path: str, what: str) -> SourceError:
    return SourceError(f"Parquet file {path!r}: {what}. Nothing was written.")


def _choose(path: str, columns: list[str], given: str | None, defaults: tuple[str, ...],
            typed: list[str], what: str, flag: str) -> str:
    if given is not None:
        if given not in columns:
            raise _fail(path, f"no {what} column {given!r}; its columns are {columns}")
        return given
    for name in (*defaults, *typed):
        if name in columns:
            return name
    raise _fail(path, f"no {what} column (tried {', '.join(defaults)}; its columns are {columns}): "
                      f"name it with {flag}")


def _is_binary(kind: pa.DataType) -> bool:
    return bool(pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
                or (hasattr(pa.types, "is_binary_view") and pa.types.is_binary_view(kind)))


def _is_text(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind)
                or (hasattr(pa.types, "is_string_view") and pa.types.is_string_view(kind)))


def _label_kind(path: str, column: str, kind: pa.DataType) -> str:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_integer(kind):
        return "numbers"
    if _is_text(kind):
        return "names"
    raise _fail(path, f"the label column {column!r} holds {kind}, not integers or class names: "
                      "name another with label_column=")


def table_layout(path: str, schema: pa.Schema, *, image_column: str | None,
                 label_column: str | None, claimed: tuple[str, ...] = ()) -> TableLayout:
    """The layout of the table in ``path`` (schema ``schema``), with the columns named if given.
    ``claimed``: columns that ``fields=`` makes fields; then the label is optional (a detection
    table has none) and no other column is kept as metadata.

    Raises:
        SourceError: no image or label column (the message lists the columns and the flag that
            names one), or one of a type that cannot be used.
    """
    columns = list(schema.names)
    features = table_features(schema)
    typed_images = [n for n, f in features.items() if isinstance(f, dict) and f.get("_type") == "Image"]
    typed_labels = [n for n, f in features.items() if _class_names(f) is not None]
    image = _choose(path, columns, image_column, IMAGE_COLUMNS, typed_images, "image", "image_column=")
    image_type = schema.field(image).type
    if pa.types.is_struct(image_type):
        fields = {image_type.field(i).name: image_type.field(i).type for i in range(image_type.num_fields)}
        if "bytes" not in fields or not _is_binary(fields["bytes"]):
            raise _fail(path, f"the image column {image!r} is a struct without binary 'bytes' "
                              f"({image_type}): name the column of encoded images with image_column=")
        field: str | None = "bytes"
        has_path = "path" in fields and _is_text(fields["path"])
    elif _is_binary(image_type):
        field, has_path = None, False
    else:
        raise _fail(path, f"the image column {image!r} holds {image_type}, not encoded image bytes (a "
                          "binary column, or a struct with 'bytes'): name another with image_column=")
    if claimed:
        return _field_layout(path, schema, image, field, has_path, label_column, claimed, typed_labels)
    label = _choose(path, columns, label_column, LABEL_COLUMNS, typed_labels, "label", "label_column=")
    if label == image:
        raise _fail(path, f"the column {label!r} cannot be both the images and the labels")
    kind = _label_kind(path, label, schema.field(label).type)
    names = _class_names(features.get(label))
    if names is not None:
        kind = "class_label"
    kept: list[str] = []
    left_out: list[str] = []
    for other in columns:
        if other in (image, label):
            continue
        value_type = schema.field(other).type
        if pa.types.is_dictionary(value_type):
            value_type = value_type.value_type
        nested = pa.types.is_nested(value_type) or _is_binary(value_type)
        (left_out if nested or pa.types.is_fixed_size_binary(value_type) else kept).append(other)
    return TableLayout(image, field, has_path, label, kind, names, tuple(kept), tuple(left_out))


def _field_layout(path: str, schema: pa.Schema, image: str, field: str | None, has_path: bool,
                  label_column: str | None, claimed: tuple[str, ...], typed_labels: list[str]) -> TableLayout:
    """The layout of a table whose ``claimed`` columns are fields: a label only if one is named
    or found among the other columns; the rest listed as left out."""
    free = [name for name in schema.names if name not in claimed and name != image]
    label = None
    if label_column is not None or any(name in free for name in (*LABEL_COLUMNS, *typed_labels)):
        label = _choose(path, free if label_column is None else list(schema.names), label_column,
                        LABEL_COLUMNS, typed_labels, "label", "label_column=")
    if label is not None and label in (image, *claimed):
        raise _fail(path, f"the column {label!r} cannot be both the labels and the images or a field")
    kind, names = "none", None
    if label is not None:
        kind = _label_kind(path, label, schema.field(label).type)
        names = _class_names(table_features(schema).get(label))
        kind = "class_label" if names is not None else kind
    left_out = tuple(name for name in free if name != label)
    return TableLayout(image, field, has_path, label, kind, names, (), left_out)


def label_targets(layout: TableLayout, labels: list[Any]) -> tuple[tuple[str, ...], list[tuple[int, int]]]:
    """The class names and, per row of ``labels`` (the label column's values), ``(target, code)``:
    code :data:`OK`, or why the row has no usable label (the target is then the bad value or 0)."""
    found: list[tuple[int, int]] = []
    if layout.label_column is None:
        return (), [(-1, OK)] * len(labels)
    if layout.class_names is not None:
        classes = layout.class_names
        position = {name: i for i, name in enumerate(classes)}
        for value in labels:
            if value is None:
                found.append((0, NO_LABEL))
            elif isinstance(value, str):
                found.append((position[value], OK) if value in position else (0, UNKNOWN_NAME))
            else:
                found.append((value, OK) if 0 <= value < len(classes) else (value, OUT_OF_RANGE))
        return classes, found
    if layout.label_kind == "numbers":
        top = max((v for v in labels if v is not None), default=-1)
        if top >= MAX_NUMBERED_CLASSES:
            raise SourceError(f"The label column {layout.label_column!r} holds {top}: labels that large "
                              f"would make {top + 1} classes. Is it an id? Name the label column with "
                              "label_column=.")
        for value in labels:
            found.append((0, NO_LABEL) if value is None else (value, NEGATIVE) if value < 0 else (value, OK))
        return tuple(str(i) for i in range(top + 1)), found
    classes = tuple(sorted({v for v in labels if v}))
    position = {name: i for i, name in enumerate(classes)}
    return classes, [(position[v], OK) if v else (0, NO_LABEL) for v in labels]


def image_suffix(data: bytes | memoryview) -> str:
    """The usual file suffix of encoded image ``data`` (``.jpg``, ``.png``, ...), or ``""``."""
    head = bytes(data[:12])
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return ".webp"
    return next((suffix for magic, suffix in _MAGIC if head.startswith(magic)), "")


def json_value(value: Any) -> tuple[Any, bool]:
    """``value`` (a row's cell) as JSON can hold it, and whether text was cut to
    :data:`METADATA_TEXT_LIMIT` characters. Non-finite floats become null; dates and times ISO
    8601 text; decimals text."""
    if isinstance(value, str):
        return (value[:METADATA_TEXT_LIMIT], True) if len(value) > METADATA_TEXT_LIMIT else (value, False)
    if isinstance(value, float) and not math.isfinite(value):
        return None, False
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat(), False
    if isinstance(value, datetime.timedelta):
        return value.total_seconds(), False
    if isinstance(value, decimal.Decimal):
        return str(value), False
    return value, False
