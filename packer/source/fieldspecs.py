"""Which of a source's columns or members become typed fields: ``fields=`` / ``--field``.

Each spec is ``[NAME=]KEY:TYPE``: ``KEY`` is what the source holds (a list's column, a
WebDataset sample's member extension), ``TYPE`` one the kind of source offers, and ``NAME`` the
field's name in the dataset (by default the key, up to its first ``.``: member ``seg.png`` makes
field ``seg``). A field name is lower-case letters, digits and ``_``, as every schema's. Every
kind of source that takes ``fields=`` parses them here, so the grammar and its messages are one.

The value types shared by the kinds (:data:`VALUE_TYPES`) are converted by :func:`typed_value`:
``text`` (a string), ``int`` and ``float`` (a number, or text that is one) and ``json`` (any
JSON value; text holds it as JSON).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final

from packer.digests import SHA256, DigestAlgorithm
from packer.errors import SourceError
from packer.source.base import ItemReader, SourceItem

__all__ = ["BOX_TYPES", "TARGET_TYPES", "VALUE_TYPES", "FieldReader", "FieldSpec", "check_targets",
           "parse_field_specs", "target_schema", "typed_value", "value_at"]

#: The types every kind that takes ``fields=`` offers.
VALUE_TYPES: Final = ("text", "int", "float", "json")
#: Boxes in each format, in pixels or ``.normalized`` (``boxes`` is ``boxes.xyxy``).
BOX_TYPES: Final = ("boxes", *(f"boxes.{fmt}{norm}" for fmt in ("xyxy", "xywh", "cxcywh")
                               for norm in ("", ".normalized")))
#: Detection targets from structured values: boxes, one class per box, and multi-label classes.
TARGET_TYPES: Final = (*BOX_TYPES, "box_labels", "labels")
#: A field name, as :mod:`packer.format.fields.schema` requires (this layer knows no schema).
_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,63}")
_INTEGER: Final = re.compile(r"\s*[+-]?\d+\s*\Z")


@dataclass(frozen=True)
class FieldSpec:
    """One ``[NAME=]KEY:TYPE``: the field's name, the column or member it comes from, its type."""

    name: str
    key: str
    type: str

    def __str__(self) -> str:
        return f"{self.key}:{self.type}" if self.name == self.key else f"{self.name}={self.key}:{self.type}"


def parse_field_specs(specs: Sequence[str], *, types: Sequence[str], taken: Collection[str],
                      where: str, what: str = "column",
                      normalize_key: Callable[[str], str] = str) -> tuple[FieldSpec, ...]:
    """The fields ``specs`` name, checked: ``types`` the kind offers, ``taken`` the field names
    the source itself gives (``image``, ``label``), ``where`` names the source in messages,
    ``normalize_key`` spells a key as the source does (a WebDataset extension lower-cased).

    Raises:
        SourceError: a spec is not ``[NAME=]KEY:TYPE``, names an unknown type, a name that is
            no field name or that is taken, or a name or a key twice.
    """
    found: list[FieldSpec] = []
    shape = f"[NAME=]{what.upper()}:TYPE, TYPE one of {', '.join(types)}"
    for given in specs:
        text = str(given)
        head, _, kind = text.rpartition(":")
        name, equals, key = head.partition("=")
        key = normalize_key(key if equals else head)
        if not equals:
            name = key.split(".", 1)[0]
        if not key or kind not in types:
            raise SourceError(f"field {text!r} for {where!r}: give {shape} (e.g. caption:text, "
                              f"caption=txt:text).")
        if not _NAME.fullmatch(name):
            raise SourceError(f"field {text!r} for {where!r}: {name!r} is no field name (lower-case "
                              f"letters, digits and _, not starting with a digit): name it, e.g. "
                              f"{'caption' if kind == 'text' else 'value'}={key}:{kind}.")
        if name in taken or any(spec.name == name for spec in found):
            raise SourceError(f"field {text!r} for {where!r}: the field {name!r} is "
                              + (f"taken by the source's own {name}" if name in taken else "given twice")
                              + ": give it another name (NAME=...).")
        if any(spec.key == key for spec in found):
            raise SourceError(f"field {text!r} for {where!r}: the {what} {key!r} is given twice.")
        found.append(FieldSpec(name, key, kind))
    return tuple(found)


def typed_value(kind: str, raw: Any, *, textual: bool) -> Any:
    """``raw`` as a value of ``kind`` (one of :data:`VALUE_TYPES`); ``textual``: ``raw`` is text
    as written (a CSV cell, a member's UTF-8), so numbers and JSON are parsed from it.

    Raises:
        TypeError, ValueError: it does not fit (the message says why).
    """
    if kind == "text":
        if not isinstance(raw, str):
            raise TypeError(f"{json.dumps(raw)} is not a string")
        return raw
    if kind == "json":
        return json.loads(raw) if textual else raw
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str) if textual else (int, float)):
        raise TypeError(f"{json.dumps(raw)} is not a number")
    if kind == "int":
        if isinstance(raw, float):
            if not raw.is_integer():
                raise ValueError(f"{raw!r} is not a whole number")
            return int(raw)
        if isinstance(raw, str) and not _INTEGER.match(raw):
            raise ValueError(f"{raw!r} is not a whole number")
        return int(raw)
    number = float(raw)
    if not math.isfinite(number):
        raise ValueError(f"{raw!r} is not a finite number")
    return number


class FieldReader(ItemReader):
    """Reads images with ``inner`` (the source's own reader) and adds the fields ``specs`` name:
    a kind's subclass says how in :meth:`values`. Pickles as ``inner``, the specs and ``how``
    (what else the kind needs: whether a list is CSV)."""

    def __init__(self, inner: ItemReader, specs: tuple[FieldSpec, ...], how: Any = None) -> None:
        self.inner, self.fields, self.how = inner, specs, how

    def read(self, item: SourceItem) -> bytes:
        """The image's bytes, as the source's own reader reads them."""
        return self.inner.read(item)

    def where(self, relpath: str) -> str:
        """Where the image lies."""
        return self.inner.where(relpath)

    def known_skip(self, item: SourceItem) -> str | None:
        """What the source's own reader knows (a missing image, label or member)."""
        return self.inner.known_skip(item)

    def dimensions(self, item: SourceItem) -> tuple[int, int] | None:
        """The image's size, from the source's own reader."""
        return self.inner.dimensions(item)

    def digest(self, item: SourceItem, algorithm: DigestAlgorithm = SHA256) -> str:
        """The image's digest by ``algorithm``, from the source's own reader."""
        return self.inner.digest(item, algorithm)

    def __eq__(self, other: object) -> bool:
        return (type(other) is type(self) and isinstance(other, FieldReader)
                and (self.inner, self.fields, self.how) == (other.inner, other.fields, other.how))

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.inner, self.fields, self.how))


def check_targets(found: Sequence[FieldSpec], where: str) -> None:
    """At most one boxes field, and ``box_labels`` only with it.

    Raises:
        SourceError: two boxes fields, or box labels without boxes.
    """
    boxes = [spec for spec in found if spec.type.startswith("boxes")]
    if len(boxes) > 1:
        raise SourceError(f"fields for {where!r}: {', '.join(map(str, boxes))} are two boxes fields: "
                          "give one.")
    if any(spec.type == "box_labels" for spec in found) and not boxes:
        raise SourceError(f"fields for {where!r}: box_labels need the boxes they label: add "
                          "NAME=KEY:boxes.xywh (or .xyxy, .cxcywh).")


def target_schema(spec: FieldSpec, boxes: str, classes: list[str]) -> dict[str, Any]:
    """The schema entry of a target field (``boxes.*``, ``box_labels``, ``labels``): a box
    format and units from its type, the boxes field ``boxes`` and the class names ``classes``."""
    if spec.type.startswith("boxes"):
        parts = spec.type.split(".")
        return {"name": spec.name, "type": "boxes", "params": {
            "image": "image", "format": parts[1] if len(parts) > 1 else "xyxy",
            "normalized": parts[-1] == "normalized"}}
    params: dict[str, Any] = {"classes": classes}
    return {"name": spec.name, "type": spec.type,
            "params": {**params, "boxes": boxes} if spec.type == "box_labels" else params}


def value_at(value: Any, path: Sequence[str]) -> Any:
    """The value at ``path`` below a structured value: into objects, and across each element of
    a list (``objects.bbox`` of a list of objects is the list of their ``bbox``)."""
    for part in path:
        if isinstance(value, list):
            value = [item.get(part) if isinstance(item, dict) else None for item in value]
        else:
            value = value.get(part) if isinstance(value, dict) else None
    return value
