"""A list file's other columns as typed fields (``--field caption:text``, ``list_fields=``).

A CSV or JSON Lines list keeps every column but the path and the label as per-sample metadata
(:mod:`packer.source.listfile`); each ``NAME:TYPE`` given makes the column ``NAME`` a field of
that type beside ``image`` and ``label``, so a sample reads back as a dict. The types:

* ``text``: a string (a CSV cell as it is; in JSON Lines, a JSON string);
* ``int``, ``float``: a JSON number, or a CSV cell that is one (``"3"``, ``"0.25"``);
* ``json``: any JSON value (a CSV cell holds it as JSON text, e.g. ``[1, 2]``).

A column no row has is an error before anything is written (naming the columns there are), and
so is a plain-text list (it has no columns). A row whose value does not fit its type, or that
lacks the column, is skipped as ``invalid_value`` naming the column: listed, so the counts add up.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from packer.errors import SourceError
from packer.source.base import ItemReader, SourceItem
from packer.source.sourcefile import UnpackableFile

__all__ = ["FIELD_TYPES", "ListField", "ListFieldReader", "list_field_schema", "parse_list_fields"]

#: The types a list column can be given.
FIELD_TYPES: Final = ("text", "int", "float", "json")


@dataclass(frozen=True)
class ListField:
    """One ``NAME:TYPE``: the column (and field) name and its type."""

    name: str
    type: str

    def value(self, row: dict[str, Any], from_csv: bool) -> Any:
        """The row's value of this column, as its type.

        Raises:
            UnpackableFile: the row lacks the column, or its value does not fit (``invalid_value``).
        """
        if self.name not in row:
            raise UnpackableFile("invalid_value",
                                 f"the row has no {self.name!r} column (list_fields= asks for {str(self)!r})")
        raw = row[self.name]
        try:
            return _converted(self.type, raw, from_csv)
        except (TypeError, ValueError) as err:
            raise UnpackableFile("invalid_value", f"column {self.name!r} ({self.type}): {err}") from None

    def __str__(self) -> str:
        return f"{self.name}:{self.type}"


def _converted(kind: str, raw: Any, from_csv: bool) -> Any:
    if kind == "text":
        if not isinstance(raw, str):
            raise TypeError(f"{json.dumps(raw)} is not a string")
        return raw
    if kind == "json":
        return json.loads(raw) if from_csv else raw
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str) if from_csv else (int, float)):
        raise TypeError(f"{json.dumps(raw)} is not a number")
    if kind == "int":
        if isinstance(raw, float):
            if not raw.is_integer():
                raise ValueError(f"{raw!r} is not a whole number")
            return int(raw)
        return int(raw)
    number = float(raw)
    if not math.isfinite(number):
        raise ValueError(f"{raw!r} is not a finite number")
    return number


def parse_list_fields(specs: Sequence[str], *, listfile: str = "<list>") -> tuple[ListField, ...]:
    """The fields ``specs`` (``"caption:text"``, ...) name, checked.

    Raises:
        SourceError: a spec is not ``NAME:TYPE``, names an unknown type, the ``image`` or
            ``label`` field, or a column twice.
    """
    found: list[ListField] = []
    for spec in specs:
        name, _, kind = str(spec).rpartition(":")
        if not name or kind not in FIELD_TYPES:
            raise SourceError(f"list field {spec!r} for {listfile!r}: give NAME:TYPE, TYPE one of "
                              f"{', '.join(FIELD_TYPES)} (e.g. caption:text).")
        if name in ("image", "label") or any(f.name == name for f in found):
            raise SourceError(f"list field {spec!r} for {listfile!r}: the field {name!r} is "
                              + ("taken by the list's image or label" if name in ("image", "label")
                                 else "given twice") + ".")
        found.append(ListField(name, kind))
    return tuple(found)


def list_field_schema(fields: Sequence[ListField], columns: Sequence[str],
                      listfile: str) -> tuple[dict[str, Any], ...]:
    """The schema of a list with ``fields``: ``image``, ``label`` and each field, in order.

    Raises:
        SourceError: a field names a column the list does not have.
    """
    missing = [f.name for f in fields if f.name not in columns]
    if missing:
        there = ", ".join(repr(c) for c in columns) or "none besides the path and label"
        raise SourceError(f"List file {listfile!r} has no column {', '.join(map(repr, missing))} (its other "
                          f"columns: {there}): fix the list_fields= names. Nothing was written.")
    return ({"name": "image", "type": "image", "params": {}},
            {"name": "label", "type": "label", "params": {}},
            *({"name": f.name, "type": f.type, "params": {}} for f in fields))


class ListFieldReader(ItemReader):
    """Reads a list's images with ``inner`` and gives each row's typed columns as fields;
    pickles as ``inner`` and the fields."""

    def __init__(self, inner: ItemReader, fields: tuple[ListField, ...], from_csv: bool) -> None:
        self.inner, self.fields, self.from_csv = inner, fields, from_csv

    def read(self, item: SourceItem) -> bytes:
        """The image's bytes, as the list's own reader reads them."""
        return self.inner.read(item)

    def where(self, relpath: str) -> str:
        """Where the image lies."""
        return self.inner.where(relpath)

    def known_skip(self, item: SourceItem) -> str | None:
        """What the list's own reader knows."""
        return self.inner.known_skip(item)

    def dimensions(self, item: SourceItem) -> tuple[int, int] | None:
        """The image's size, from the list's own reader."""
        return self.inner.dimensions(item)

    def digest(self, item: SourceItem) -> str:
        """The image's SHA-256, from the list's own reader."""
        return self.inner.digest(item)

    def values(self, item: SourceItem, data: bytes, metadata: str) -> dict[str, Any]:
        """The image and each field's value from the row (``metadata``: its other columns)."""
        row = json.loads(metadata) if metadata else {}
        return {"image": data, **{f.name: f.value(row, self.from_csv) for f in self.fields}}

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ListFieldReader)
                and (self.inner, self.fields, self.from_csv) == (other.inner, other.fields, other.from_csv))

    def __hash__(self) -> int:
        return hash((self.inner, self.fields, self.from_csv))
