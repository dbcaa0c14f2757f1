"""A WebDataset sample's members as typed fields: ``fields=["mask=seg.png:mask", "caption=txt:text"]``.

Each ``[NAME=]EXTENSION:TYPE`` (:mod:`packer.source.fieldspecs`) makes the member with that
extension a field beside ``image`` (and ``label``, when the samples have one). The types:

* ``text``, ``int``, ``float``, ``json``: the member's UTF-8 text, as a string, a number or a
  JSON value (what ``webdataset``'s default decoders give for ``txt``, ``cls`` and ``json``);
* ``bytes``: the member as stored;
* ``mask``: a lossless image of class indices (a PNG, ``L`` or ``P`` mode), the size of the
  sample's image;
* ``image``: another image (a depth map, a second view), stored by the conversion's codec;
* ``boxes.xywh`` (and the other formats of :data:`~packer.source.fieldspecs.BOX_TYPES`),
  ``box_labels``, ``labels``: detection targets from a JSON member, the whole member or a path
  into it after ``#`` (``boxes=json#objects.bbox:boxes.xywh``,
  ``box_labels=json#objects.label:box_labels``; a path goes into objects and across lists, as
  for Parquet columns); box labels are unnamed indices.

A member named by a field is never the sample's image. Members are read by byte range when the
sample is packed, each at most ``max_bytes``. A sample without one of them is skipped as
``missing_member``, one whose member does not fit its type as ``invalid_value``, naming the
member: listed, so the counts add up.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from packer.source.archive.members import Member
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
from packer.source.sourcefile import UnpackableFile
from packer.source.statuses import OK

__all__ = ["MEMBER_TYPES", "MemberFieldReader", "member_extension", "member_locations", "member_schema",
           "parse_member_fields"]

#: The types a member can be given.
MEMBER_TYPES: Final = (*VALUE_TYPES, "bytes", "mask", "image", *TARGET_TYPES)


def member_extension(spec: FieldSpec) -> str:
    """The member a field reads: its key up to a ``#`` JSON path."""
    return spec.key.partition("#")[0]


def parse_member_fields(specs: Sequence[str], *, where: str) -> tuple[FieldSpec, ...]:
    """The fields ``specs`` name, checked (extensions lower-cased, as members' are).

    Raises:
        SourceError: see :func:`packer.source.fieldspecs.parse_field_specs`.
    """
    found = parse_field_specs(specs, types=MEMBER_TYPES, taken=("image", "label"), where=where,
                              what="extension", normalize_key=_lower_extension)
    check_targets(found, where)
    return found


def _lower_extension(key: str) -> str:
    """``key`` with its member extension lower-cased, as members' are (a JSON path after ``#``
    kept as written)."""
    extension, hash_mark, path = key.partition("#")
    return f"{extension.lower()}{hash_mark}{path}"


def member_schema(fields: Sequence[FieldSpec], classes: tuple[str, ...] | None) -> tuple[dict[str, Any], ...]:
    """The schema of samples with ``fields``: ``image``, ``label`` (unless ``classes`` is None:
    the samples have none), then each field in the order given."""
    params = {"mask": {"image": "image"}}
    boxes = next((f.name for f in fields if f.type.startswith("boxes")), "")
    return ({"name": "image", "type": "image", "params": {}},
            *(({"name": "label", "type": "label", "params": {"classes": list(classes)}},)
              if classes is not None else ()),
            *(target_schema(f, boxes, []) if f.type in TARGET_TYPES
              else {"name": f.name, "type": f.type, "params": params.get(f.type, {})} for f in fields))


def member_locations(members: dict[str, tuple[Member, bytes | None]],
                     fields: Sequence[FieldSpec]) -> tuple[str, list[str]]:
    """A sample's field members as the item's metadata (``{"members": {ext: [offset, size,
    status]}}``, JSON), and the extensions it lacks."""
    found, missing = {}, []
    for spec in fields:
        extension = member_extension(spec)
        entry = members.get(extension)
        if entry is None:
            missing.append(extension)
        else:
            found[extension] = [entry[0].offset, entry[0].size, entry[0].status]
    return json.dumps({"members": found}, sort_keys=True), missing


class MemberFieldReader(FieldReader):
    """Reads a sample's image with the shards' reader, and its field members by byte range
    through it."""

    def values(self, item: SourceItem, data: bytes, metadata: str) -> dict[str, Any]:
        """The image and each field's member, read and typed.

        Raises:
            UnpackableFile: a member is damaged, too large, or does not fit its type.
        """
        located = json.loads(metadata)["members"]
        read: dict[str, bytes] = {}  # each member read once, however many fields it gives
        parsed: dict[str, Any] = {}  # and a JSON member parsed once
        values: dict[str, Any] = {"image": data}
        for spec in self.fields:
            extension = member_extension(spec)
            if extension not in read:
                read[extension] = self._member(item, spec, located[extension])
            values[spec.name] = self._value(spec, read[extension], parsed)
        return values

    def _member(self, item: SourceItem, spec: FieldSpec, location: list[int]) -> bytes:
        """The bytes of the member at ``location`` in the item's shard."""
        offset, size, status = location
        member = SourceItem(item.relpath, 0, size, item.mtime_ns, (item.locator[0], offset, status))
        try:
            return self.inner.read(member) if size or status != OK else b""
        except UnpackableFile as err:
            raise UnpackableFile(err.reason, f"its {member_extension(spec)!r} member: {err.detail}") from None

    @staticmethod
    def _value(spec: FieldSpec, data: bytes, parsed: dict[str, Any]) -> Any:
        """One field's value from its member's bytes (``parsed``: JSON members parsed so far)."""
        if spec.type in ("bytes", "mask", "image"):
            return data
        extension, _, path = spec.key.partition("#")
        try:
            text = data.decode("utf-8")
            if not path and spec.type in VALUE_TYPES:
                return typed_value(spec.type, text, textual=True)
            if extension not in parsed:
                parsed[extension] = json.loads(text)
            value = value_at(parsed[extension], path.split(".")) if path else parsed[extension]
            if value is None:
                raise ValueError(f"{'the path ' + repr(path) if path else 'it'} holds no value")
            return typed_value(spec.type, value, textual=False) if spec.type in VALUE_TYPES else value
        except (TypeError, ValueError) as err:  # UnicodeDecodeError is a ValueError
            raise UnpackableFile("invalid_value", f"its {spec.key!r} member ({spec.type}): {err}") from None
