"""A Parquet table's columns as typed fields: ``fields=["caption:text", "boxes=objects.bbox:boxes.xywh",
"box_labels=objects.category:box_labels"]``.

Each ``[NAME=]COLUMN:TYPE`` (:mod:`packer.source.fieldspecs`) makes a column, or a path into a
struct column (``objects.bbox``: Hugging Face's ``Sequence({"bbox": ..., "category": ...})``,
stored as a struct of lists or a list of structs), a field beside ``image`` (and ``label``, when
the table has a label column). The types:

* ``text``, ``int``, ``float``, ``json``: a cell as a string, a number or any JSON value;
* ``boxes.xyxy``, ``boxes.xywh``, ``boxes.cxcywh`` (``boxes`` is ``boxes.xyxy``), in pixels, or
  with ``.normalized`` in [0, 1]: a list of 4-number lists (COCO-style tables' ``bbox`` is
  ``boxes.xywh``);
* ``box_labels``: a list of class indices, one per box of the table's one boxes field;
* ``labels``: a list of class indices (multi-label);
* ``mask`` (a lossless image of class indices, a PNG, the size of the row's image: Hugging Face
  segmentation tables' ``annotation``), ``image`` (a second image, stored by the conversion's
  codec) and ``bytes``: a whole binary or ``Image`` column (``{bytes, path}`` structs).

Class names of ``box_labels`` and ``labels`` come from the ``ClassLabel`` feature the table's
``huggingface`` metadata records at that path (``Sequence(ClassLabel(names=[...]))``); without one
they are unnamed indices. The scan reads the field columns with the rest, one row group at a
time; a row's values are kept with its item (at most ``max_bytes`` of JSON, else ``too_large``).
A binary cell is not kept: the scan notes its length and digest, and the worker packing the row
reads it again a row group at a time (:meth:`~packer.source.parquet.read.ParquetReader.cell`), so
a table changed under the conversion is an error; a cell over ``max_bytes`` skips its row as
``too_large`` without being copied. A null or misshapen value skips its row as
``invalid_value`` naming the column.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, cast

import pyarrow as pa

from packer.errors import SourceError
from packer.source.base import SourceItem
from packer.source.fieldspecs import (
    TARGET_TYPES,
    VALUE_TYPES,
    FieldReader,
    FieldSpec,
    check_targets,
    parse_field_specs,
    target_schema,
    typed_value,
    value_at,
)
from packer.source.parquet.cells import binary_cells, bytes_of
from packer.source.parquet.read import ParquetReader, digest_of
from packer.source.parquet.schema import json_value, table_features
from packer.source.sourcefile import UnpackableFile

__all__ = ["BINARY_TYPES", "PARQUET_TYPES", "ParquetFieldReader", "binary_leaf", "binary_leaves",
           "cells_differ", "field_records", "parquet_field_schema", "parse_parquet_fields"]

#: The types of a whole binary or Image column, read again by the worker packing the row.
BINARY_TYPES: Final = ("mask", "image", "bytes")
#: The types a column can be given.
PARQUET_TYPES: Final = (*VALUE_TYPES, *TARGET_TYPES, *BINARY_TYPES)
_LISTS: Final = ("Sequence", "List", "LargeList")
#: A row's field values too large to keep (its read raises ``too_large``).
_TOO_LARGE: Final = "__too_large__"


def parse_parquet_fields(specs: Sequence[str], *, where: str) -> tuple[FieldSpec, ...]:
    """The fields ``specs`` name, checked: at most one boxes field, and ``box_labels`` only with it.

    Raises:
        SourceError: see :func:`packer.source.fieldspecs.parse_field_specs`, and the two rules above.
    """
    found = parse_field_specs(specs, types=PARQUET_TYPES, taken=("image", "label"), where=where)
    check_targets(found, where)
    for spec in found:
        if spec.type in BINARY_TYPES and "." in spec.key:
            raise SourceError(f"field {str(spec)!r} for {where!r}: a {spec.type} field is a whole binary or "
                              f"Image column, not a path into one: name the column ({spec.name}="
                              f"{spec.key.split('.', 1)[0]}:{spec.type}).")
    return found


def field_columns(specs: Sequence[FieldSpec]) -> tuple[str, ...]:
    """The table columns the fields read (a path's first part), in order, once each."""
    return tuple(dict.fromkeys(spec.key.split(".", 1)[0] for spec in specs))


def check_columns(specs: Sequence[FieldSpec], schema: pa.Schema, path: str) -> None:
    """Every field's column is in the table, and a binary field's column is binary or Image.

    Raises:
        SourceError: one is not, naming the columns there are.
    """
    missing = [column for column in field_columns(specs) if column not in schema.names]
    if missing:
        raise SourceError(f"Parquet file {path!r} has no column {', '.join(map(repr, missing))} (its "
                          f"columns: {', '.join(map(repr, schema.names))}): fix the fields= names. Nothing "
                          "was written.")
    for spec in specs:
        if spec.type in BINARY_TYPES and binary_leaf(schema, spec.key) is None:
            raise SourceError(f"Parquet file {path!r}: column {spec.key!r} is {schema.field(spec.key).type}, "
                              f"neither binary nor an Image column ({{bytes, path}}), so it cannot be the "
                              f"{spec.type} field {spec.name!r}. Nothing was written.")


def binary_leaves(specs: Sequence[FieldSpec], schema: pa.Schema) -> tuple[tuple[str, str, str], ...]:
    """Each binary field's ``(name, leaf, column)`` in a table of ``schema`` (checked columns)."""
    return tuple((spec.name, binary_leaf(schema, spec.key) or spec.key, spec.key)
                 for spec in specs if spec.type in BINARY_TYPES)


def cells_differ(specs: Sequence[FieldSpec], first: pa.Schema, other: pa.Schema) -> str | None:
    """How a table's binary field columns differ from the first table's (None: they agree)."""
    mine, theirs = binary_leaves(specs, first), binary_leaves(specs, other)
    if mine == theirs:
        return None
    return "its binary field columns hold their bytes differently (" + ", ".join(
        f"{a[2]!r}: {a[1]} against {b[1]}" for a, b in zip(mine, theirs, strict=True) if a != b) + ")"


def binary_leaf(schema: pa.Schema, column: str) -> str | None:
    """The path of ``column``'s bytes: the column, or ``column.bytes`` in an Image column's
    structs; None when it holds no bytes."""
    kind = schema.field(column).type
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return column
    if pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0:
        inner = kind.field("bytes").type
        return f"{column}.bytes" if pa.types.is_binary(inner) or pa.types.is_large_binary(inner) else None
    return None


def _class_names_at(features: Mapping[str, Any], key: str) -> list[str]:
    """The ClassLabel names recorded at ``key`` (through lists and structs), or [] for none."""
    node: Any = features
    for part in key.split("."):
        while isinstance(node, dict) and node.get("_type") in _LISTS:
            node = node.get("feature")
        node = node.get(part) if isinstance(node, dict) and "_type" not in node else None
    while isinstance(node, dict) and node.get("_type") in _LISTS:
        node = node.get("feature")
    if isinstance(node, dict) and node.get("_type") == "ClassLabel" and isinstance(node.get("names"), list):
        return [str(name) for name in node["names"]]
    return []


def parquet_field_schema(specs: Sequence[FieldSpec], schema: pa.Schema,
                         classes: tuple[str, ...] | None) -> tuple[dict[str, Any], ...]:
    """The schema of rows with ``specs``: ``image``, ``label`` (unless ``classes`` is None),
    then each field, with its box format and class names."""
    features = table_features(schema)
    boxes = next((spec.name for spec in specs if spec.type.startswith("boxes")), "")
    fields: list[dict[str, Any]] = [{"name": "image", "type": "image", "params": {}}]
    if classes is not None:
        fields.append({"name": "label", "type": "label", "params": {"classes": list(classes)}})
    for spec in specs:
        if spec.type in TARGET_TYPES:
            fields.append(target_schema(spec, boxes, _class_names_at(features, spec.key)))
        elif spec.type == "mask":
            fields.append({"name": spec.name, "type": "mask", "params": {"image": "image"}})
        else:
            fields.append({"name": spec.name, "type": spec.type, "params": {}})
    return tuple(fields)


def _plain(value: Any) -> Any:
    """A cell as JSON holds it (every text kept whole: these are the fields themselves)."""
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        raise ValueError("binary values cannot be fields of these types")
    return json_value(value)[0]


def field_records(batch: pa.RecordBatch, specs: Sequence[FieldSpec], max_bytes: int) -> list[str]:
    """Per row of ``batch``, its fields' values as JSON text (the item's metadata); a binary
    field's value is its cell's ``[length, digest]`` (null: None; over ``max_bytes``: too large)."""
    plain = [spec for spec in specs if spec.type not in BINARY_TYPES]
    cells = {column: batch.column(column).to_pylist() for column in field_columns(plain)}
    binary = {spec.name: list(binary_cells(bytes_of(batch.column(spec.key))))
              for spec in specs if spec.type in BINARY_TYPES}
    records = []
    for row in range(batch.num_rows):
        record: dict[str, Any] = {}
        for spec in plain:
            column, *path = spec.key.split(".")
            try:
                record[spec.name] = _plain(value_at(cells[column][row], path))
            except ValueError:
                record[spec.name] = {_TOO_LARGE: "binary"}
        for name, values in binary.items():
            value = values[row]
            record[name] = (None if value is None else {_TOO_LARGE: len(value)} if len(value) > max_bytes
                            else [len(value), digest_of(value)])
        text = json.dumps(record, sort_keys=True, ensure_ascii=False)
        records.append(text if len(text) <= max_bytes else json.dumps({_TOO_LARGE: len(text)}))
    return records


class ParquetFieldReader(FieldReader):
    """Reads rows' images with the table's reader and gives each row's typed field values
    (kept with its item by the scan; a binary column's cell read again here). ``how``: each
    binary field's ``(name, leaf, column)``."""

    def values(self, item: SourceItem, data: bytes, metadata: str) -> dict[str, Any]:
        """The image and each field's value.

        Raises:
            UnpackableFile: a value is null or does not fit its type (``invalid_value``), or the
                row's values are over ``max_bytes`` (``too_large``).
            SourceError: a binary cell changed since the scan.
        """
        record = json.loads(metadata)
        if _TOO_LARGE in record:
            raise UnpackableFile("too_large", f"the row's field values take {record[_TOO_LARGE]} bytes of "
                                              "JSON, more than max_bytes")
        values = {"image": data}
        for spec in self.fields:
            raw = record.get(spec.name)
            binary = spec.type in BINARY_TYPES
            values[spec.name] = self._cell(item, spec, raw) if binary else _value(spec, raw)
        return values

    def _cell(self, item: SourceItem, spec: FieldSpec, found: Any) -> bytes:
        """A binary field's cell, as the scan saw it (``found``: its length and digest)."""
        if isinstance(found, dict) and _TOO_LARGE in found:
            raise UnpackableFile("too_large", f"column {spec.key!r} ({spec.type}) holds {found[_TOO_LARGE]} "
                                              "bytes in this row, more than max_bytes: raise max_bytes to "
                                              "pack it")
        if found is None:
            raise UnpackableFile("invalid_value", f"column {spec.key!r} ({spec.type}) is null in this row")
        readers: dict[str, ParquetReader] = self.__dict__.setdefault("_cells", {})
        if spec.name not in readers:
            leaf, column = next((leaf, column) for name, leaf, column in self.how if name == spec.name)
            readers[spec.name] = cast(ParquetReader, self.inner).sibling(leaf, column)
        return readers[spec.name].cell(item, int(found[0]), int(found[1]))

    def __getstate__(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if key != "_cells"}


def _value(spec: FieldSpec, raw: Any) -> Any:
    if isinstance(raw, dict) and _TOO_LARGE in raw:
        raise UnpackableFile("invalid_value", f"column {spec.key!r} ({spec.type}) holds binary values")
    if raw is None and spec.type != "json":
        raise UnpackableFile("invalid_value", f"column {spec.key!r} ({spec.type}) is null in this row")
    if spec.type in VALUE_TYPES:
        try:
            return typed_value(spec.type, raw, textual=False)
        except (TypeError, ValueError) as err:
            raise UnpackableFile("invalid_value", f"column {spec.key!r} ({spec.type}): {err}") from None
    return raw  # boxes and class indices: their field types check the shapes and ranges
