"""A packed dataset whose samples are dicts of named fields (image, mask, boxes, text, ...).

:func:`packer.open_dataset` returns a :class:`FieldDataset` for a dataset with a schema other
than ImageFolder's (or when ``fields=`` is given): ``ds[i]`` is ``{field: value}`` in the
schema's order (``fields=`` selects and orders them), each value decoded by its type (an image a
PIL image, a mask or boxes a numpy array, text a ``str``) or left as its stored bytes where
``decode`` says so (an image for the joint fast path, which decodes at reduced scale). The class
``label`` comes from the sample index, as ImageFolder's targets. Everything else (workers,
pickling, remote reading, versions) is :class:`~packer.read.datasets.PackedImageDataset`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, ClassVar

from packer.errors import DatasetError
from packer.format.fields.schema import Schema
from packer.format.fields.stored import stored_decoder
from packer.format.shardset import ShardSet
from packer.read.datasets import PackedImageDataset

__all__ = ["Decode", "FieldDataset"]

#: How fields are returned: True (all decoded), False (all as stored bytes), or per field
#: ``{"image": False}`` (unnamed fields decoded).
Decode = bool | Mapping[str, bool]


def _chosen(schema: Schema, fields: Sequence[str] | None, where: str) -> tuple[str, ...]:
    names = schema.names()
    if fields is None:
        return names
    if isinstance(fields, str):
        raise TypeError(f"fields must be a sequence of field names, not the str {fields!r}: "
                        f"write fields=({fields!r},)")
    unknown = [name for name in fields if name not in names]
    if unknown or len(set(fields)) != len(fields):
        what = f"no field(s) {unknown}" if unknown else "a field twice"
        raise DatasetError(f"{where}: fields= names {what}; its fields are {', '.join(names)}")
    return tuple(fields)


def _raw(schema: Schema, decode: Decode, where: str) -> frozenset[str]:
    """The fields returned as stored bytes."""
    if isinstance(decode, bool):
        return frozenset() if decode else frozenset(f.name for f in schema.in_record())
    unknown = sorted(set(decode) - set(schema.names()))
    if unknown:
        raise DatasetError(f"{where}: decode= names no field(s) {unknown}; its fields are "
                           f"{', '.join(schema.names())}")
    return frozenset(name for name, wanted in decode.items() if not wanted and schema[name].kind().in_record)


class FieldDataset(PackedImageDataset):
    """A dataset read as one dict of fields per sample; open it with :func:`packer.open_dataset`.

    Args (beyond :class:`~packer.read.datasets.PackedImageDataset`'s ``root`` and remote ones):
        transform: Applied to each sample dict (a joint transform, albumentations through an
            adapter, any callable); its result is what ``ds[i]`` returns.
        fields: The fields returned, in this order (default: all, in the schema's order).
        decode: True decodes every field; False returns each in-record field as its stored
            bytes; ``{"image": False}`` chooses per field (unnamed ones are decoded).
    """

    reads_fields: ClassVar[bool] = True

    def __init__(self, root: Any, transform: Callable[[dict[str, Any]], Any] | None = None, *,
                 fields: Sequence[str] | None = None, decode: Decode = True, **options: Any) -> None:
        self._fields_wanted, self._decode_wanted = fields, decode
        super().__init__(root, transform, decode=True, **options)

    @classmethod
    def over(cls, shards: ShardSet, transform: Callable[[dict[str, Any]], Any] | None, *,
             fields: Sequence[str] | None, decode: Decode) -> FieldDataset:
        """A dataset over a ShardSet already opened (what :func:`packer.open_dataset` uses)."""
        dataset = cls.__new__(cls)
        dataset._fields_wanted, dataset._decode_wanted = fields, decode
        dataset.transform, dataset.target_transform, dataset.decode = transform, None, True
        dataset._open_shards(shards)
        return dataset

    def _open_shards(self, shards: ShardSet) -> None:
        super()._open_shards(shards)
        schema = shards.manifest.schema
        self.schema: Schema = schema
        self.fields: tuple[str, ...] = _chosen(schema, self._fields_wanted, self.root)
        self._raw = _raw(schema, self._decode_wanted, self.root)
        label = schema.label_field()
        self._label_name = label.name if label is not None else None
        self._decoder = stored_decoder(schema)
        self._in_record = tuple(name for name in self.fields if name != self._label_name)

    def _finish(self, payload: bytes, target: int) -> Any:
        try:
            values = self._decoder.decode(payload, self._in_record, self._raw)
        except ValueError as err:
            raise DatasetError(f"{self.root!r}: a record does not hold its schema's fields ({err}); "
                               "the dataset is damaged: run packer verify, then re-convert.") from err
        sample = {name: target if name == self._label_name else values[name] for name in self.fields}
        return sample if self.transform is None else self.transform(sample)

    def __getitems__(self, indices: Sequence[int]) -> Sequence[Any]:
        """A batch in one read per shard."""
        wanted = [self._normalise(i) for i in indices]
        targets = self._index.targets
        payloads = self._shards.read_many(wanted)
        return [self._finish(p, int(targets[i])) for p, i in zip(payloads, wanted, strict=True)]

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "fields": self._fields_wanted, "decode_fields": self._decode_wanted}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._fields_wanted, self._decode_wanted = state["fields"], state["decode_fields"]
        super().__setstate__(state)

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, fields={list(self.fields)})"


def decode_of(decode: Decode | Collection[str]) -> Decode:
    """``decode`` as given to :func:`packer.open_dataset`, checked for its type."""
    if isinstance(decode, bool | Mapping):
        return decode
    raise TypeError(f"decode must be True, False or a mapping of field names to bools, not {decode!r}")
