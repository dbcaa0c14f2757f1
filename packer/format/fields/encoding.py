"""A sample's values to its record, and a record back to values, by its schema.

:class:`SampleEncoder` is what a shard task calls for each sample: every in-record field's type
encodes its value in schema order (a mask or boxes checked against the image before it), and
the payloads become one record (:mod:`packer.format.fields.record`). An ImageFolder conversion
goes through it too: its one field is the image, so its record is the codec's output itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packer.format.fields.base import FieldType, FieldValueError
from packer.format.fields.record import pack_record, unpack_record
from packer.format.fields.schema import Schema

__all__ = ["SampleDecoder", "SampleEncoder"]


def _kinds(schema: Schema, bound: Mapping[str, FieldType]) -> list[tuple[str, FieldType, Mapping[str, Any]]]:
    return [(f.name, bound.get(f.name) or f.kind(), f.params) for f in schema.in_record()]


class SampleEncoder:
    """Encodes samples of ``schema``; ``bound``: field name -> a type instance to use instead of
    the registered one (an image type bound to a conversion's codec object)."""

    def __init__(self, schema: Schema, bound: Mapping[str, FieldType] | None = None) -> None:
        self.fields = _kinds(schema, bound or {})
        referred = {target for f in schema for param in f.kind().refers_to if (target := f.params.get(param))}
        # Only fields others check against pay for their context (an image's header read).
        self._gives_context = frozenset(referred)

    def encode(self, values: Mapping[str, Any]) -> bytes:
        """The record of one sample.

        Raises:
            FieldValueError: a value is missing or does not fit its field (the sample is skipped).
        """
        context: dict[str, Any] = {}
        payloads = []
        for name, kind, params in self.fields:
            if name not in values:
                raise FieldValueError("invalid_value", f"the sample has no value for field {name!r}")
            payload = kind.encode(values[name], params, context=context)
            if name in self._gives_context:
                context.update(kind.context_of(name, values[name], payload, params))
            payloads.append(payload)
        return pack_record(payloads)


class SampleDecoder:
    """Decodes records of ``schema`` into ``{field: value}`` (the in-record fields; ``fields``
    selects and orders them, ``raw`` names those returned as stored bytes)."""

    def __init__(self, schema: Schema, bound: Mapping[str, FieldType] | None = None) -> None:
        self.fields = _kinds(schema, bound or {})

    def decode(self, record: bytes | memoryview, fields: tuple[str, ...] | None = None,
               raw: frozenset[str] = frozenset()) -> dict[str, Any]:
        """The values of one record.

        Raises:
            ValueError: the record does not hold this schema's fields (damaged); the caller names
                the shard.
            KeyError: ``fields`` names a field the schema's records do not hold.
        """
        payloads = unpack_record(record, len(self.fields))
        by_name = {name: (kind, params, payload)
                   for (name, kind, params), payload in zip(self.fields, payloads, strict=True)}
        out = {}
        for name in fields if fields is not None else tuple(by_name):
            kind, params, payload = by_name[name]
            out[name] = bytes(payload) if name in raw else kind.decode(payload, params)
        return out
