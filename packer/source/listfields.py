"""A list file's other columns as typed fields (``--field caption:text``, ``fields=``).

A CSV or JSON Lines list keeps every column but the path and the label as per-sample metadata
(:mod:`packer.source.listfile`); each ``[NAME=]COLUMN:TYPE`` given (:mod:`packer.source.fieldspecs`)
makes the column a field of that type beside ``image`` and ``label``, so a sample reads back as
a dict. The types:

* ``text``: a string (a CSV cell as it is; in JSON Lines, a JSON string);
* ``int``, ``float``: a JSON number, or a CSV cell that is one (``"3"``, ``"0.25"``);
* ``json``: any JSON value (a CSV cell holds it as JSON text, e.g. ``[1, 2]``).

A column no row has is an error before anything is written (naming the columns there are), and
so is a plain-text list (it has no columns). A row whose value does not fit its type, or that
lacks the column, is skipped as ``invalid_value`` naming the column: listed, so the counts add up.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from packer.errors import SourceError
from packer.source.base import SourceItem
from packer.source.fieldspecs import VALUE_TYPES, FieldReader, FieldSpec, parse_field_specs, typed_value
from packer.source.sourcefile import UnpackableFile

__all__ = ["ListFieldReader", "list_field_schema", "list_field_value", "parse_list_fields"]


def list_field_value(spec: FieldSpec, row: dict[str, Any], from_csv: bool) -> Any:
    """The row's value of the spec's column, as its type.

    Raises:
        UnpackableFile: the row lacks the column, or its value does not fit (``invalid_value``).
    """
    if spec.key not in row:
        raise UnpackableFile("invalid_value", f"the row has no {spec.key!r} column (fields= asks for "
                                              f"{str(spec)!r})")
    try:
        return typed_value(spec.type, row[spec.key], textual=from_csv)
    except (TypeError, ValueError) as err:
        raise UnpackableFile("invalid_value", f"column {spec.key!r} ({spec.type}): {err}") from None


def parse_list_fields(specs: Sequence[str], *, listfile: str = "<list>") -> tuple[FieldSpec, ...]:
    """The fields ``specs`` (``"caption:text"``, ``"caption=Caption:text"``) name, checked.

    Raises:
        SourceError: see :func:`packer.source.fieldspecs.parse_field_specs`.
    """
    return parse_field_specs(specs, types=VALUE_TYPES, taken=("image", "label"), where=listfile)


def list_field_schema(fields: Sequence[FieldSpec], columns: Sequence[str],
                      listfile: str) -> tuple[dict[str, Any], ...]:
    """The schema of a list with ``fields``: ``image``, ``label`` and each field, in order.

    Raises:
        SourceError: a field names a column the list does not have.
    """
    missing = [f.key for f in fields if f.key not in columns]
    if missing:
        there = ", ".join(repr(c) for c in columns) or "none besides the path and label"
        raise SourceError(f"List file {listfile!r} has no column {', '.join(map(repr, missing))} (its other "
                          f"columns: {there}): fix the fields= names. Nothing was written.")
    return ({"name": "image", "type": "image", "params": {}},
            {"name": "label", "type": "label", "params": {}},
            *({"name": f.name, "type": f.type, "params": {}} for f in fields))


class ListFieldReader(FieldReader):
    """Reads a list's images with its own reader and gives each row's typed columns as fields
    (``how``: whether the list is CSV, whose cells are text)."""

    def values(self, item: SourceItem, data: bytes, metadata: str) -> dict[str, Any]:
        """The image and each field's value from the row (``metadata``: its other columns)."""
        row = json.loads(metadata) if metadata else {}
        return {"image": data, **{f.name: list_field_value(f, row, bool(self.how)) for f in self.fields}}
