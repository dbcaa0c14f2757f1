"""Samples from Python as a source: each sample's values spooled to one file, read by the workers.

:func:`packer.write` takes any iterable of dicts, which no worker process can share. So the
samples are first written, in order, to a spool file (each sample's in-record values pickled,
one after the other) in a private folder beside DST, and the spool is then converted like any
other source: the workers encode (the costly part: PNG, JPEG) in parallel, and resume, engines,
array tasks and versions all apply. The spool is packer's own file in a folder only this user can
read, written and read by one call; nothing from elsewhere is ever unpickled.

Identity (what ``resume`` compares): a sample's spooled size and a digest of its bytes, as a
Parquet row's. Labels are checked here: a sample whose class label is missing or no class
index is listed with its status and skipped, as a source's out-of-range label is.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Iterable, Mapping
from typing import Any, BinaryIO, ClassVar

from packer.format.fields.schema import Schema
from packer.keys import check_key
from packer.source.base import ItemReader, ScanReport, Source, SourceIndex, SourceItem, SourceOptions
from packer.source.imagecheck import image_dimensions
from packer.source.sourcefile import UnpackableFile
from packer.source.statuses import LABEL_OUT_OF_RANGE, MISSING_LABEL, OK, TOO_LARGE, skip_reason

__all__ = ["KEY", "LOCATION", "SPOOL_NAME", "SpoolReader", "SpoolSource", "spool_samples"]

#: The sample dict key naming a sample (its path in the dataset); default: its number, ``%08d``.
KEY = "__key__"
SPOOL_NAME = "samples.spool"
#: What the manifest's ``source`` says of a dataset written from Python.
LOCATION = "samples from Python (packer.write)"


def _label(sample: Mapping[str, Any], name: str | None, classes: int) -> tuple[int, int]:
    """``(label, status)`` of a sample: -1 without a label field (no class), else its index."""
    if name is None:
        return -1, OK
    value = sample.get(name)
    if value is None:
        return -1, MISSING_LABEL
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        return -1, LABEL_OUT_OF_RANGE
    index = int(value.__index__())
    return (index, OK) if 0 <= index < classes else (-1, LABEL_OUT_OF_RANGE)


def _key_of(sample: Mapping[str, Any], number: int, seen: set[str], where: str) -> str:
    key = sample.get(KEY, f"{number:08d}")
    if not isinstance(key, str):
        raise ValueError(f"sample {number}: {KEY} must be a str (the sample's path), not "
                         f"{type(key).__name__}")
    check_key(key, source=where, what=f"sample {number}'s {KEY}")
    if key in seen:
        raise ValueError(f"sample {number}: {KEY} {key!r} is given twice; each sample needs its own key")
    seen.add(key)
    return key


def spool_samples(samples: Iterable[Mapping[str, Any]], schema: Schema, out: BinaryIO, *,
                  max_bytes: int, where: str) -> list[SourceItem]:
    """Write each sample's in-record values to ``out``; return the items, in order.

    Raises:
        ValueError: a sample is not a mapping, has a field the schema lacks, or a bad or
            repeated ``__key__``: the message names the sample and the fix. Nothing was
            written to DST yet.
    """
    label = schema.label_field()
    classes = len(label.params["classes"]) if label is not None else 0
    stored = [f.name for f in schema.in_record()]
    allowed = {*schema.names(), KEY}
    items: list[SourceItem] = []
    seen: set[str] = set()
    offset = 0
    for number, sample in enumerate(samples):
        if not isinstance(sample, Mapping):
            raise ValueError(f"sample {number} is a {type(sample).__name__}, not a dict of field values")
        unknown = sorted(set(sample) - allowed)
        if unknown:
            raise ValueError(f"sample {number} has values for {unknown}, which the schema does not "
                             f"name (its fields: {', '.join(schema.names())}): add them to the schema "
                             "or leave them out")
        key = _key_of(sample, number, seen, where)
        target, status = _label(sample, label.name if label else None, classes)
        blob = pickle.dumps({name: sample[name] for name in stored if name in sample}, protocol=5)
        if len(blob) > max_bytes:
            status, blob = TOO_LARGE, b""
        out.write(blob)
        digest = int.from_bytes(hashlib.sha256(blob).digest()[:8], "little") >> 1
        items.append(SourceItem(key, target, len(blob), digest,
                                (status, offset, len(blob))))
        offset += len(blob)
    return items


class SpoolReader(ItemReader):
    """Reads spooled samples back, in any process (it pickles as the spool's path)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: BinaryIO | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def known_skip(self, item: SourceItem) -> str | None:
        return skip_reason(item.locator[0])

    def read(self, item: SourceItem) -> bytes:
        status, offset, length = item.locator
        reason = skip_reason(status)
        if reason is not None:
            raise UnpackableFile(reason, _DETAILS.get(status, reason))
        if self._file is None:
            self._file = open(self.path, "rb")  # noqa: SIM115 (kept open across reads)
        self._file.seek(offset)
        return self._file.read(length)

    def values(self, item: SourceItem, data: bytes, metadata: str) -> dict[str, Any]:
        return pickle.loads(data)  # noqa: S301 (our own spool, written by this call)

    def dimensions(self, item: SourceItem) -> tuple[int, int] | None:
        """The first image value's size, for planning codecs that re-encode."""
        try:
            values = self.values(item, self.read(item), "")
        except UnpackableFile:
            return None
        for value in values.values():
            if isinstance(value, bytes | bytearray | memoryview):
                found = image_dimensions(bytes(value))
                if found is not None:
                    return found
            elif hasattr(value, "size") and isinstance(getattr(value, "size"), tuple):  # a PIL image
                return value.size
        return None

    def where(self, relpath: str) -> str:
        return f"sample {relpath!r}"


_DETAILS = {MISSING_LABEL: "the sample has no value for its class label",
            LABEL_OUT_OF_RANGE: "the sample's label is not an integer class index of the schema's classes",
            TOO_LARGE: "the sample's values take more bytes than max_bytes"}


class SpoolSource(Source):
    """The spooled samples of one :func:`packer.write` call, as a source."""

    kind: ClassVar[str] = "python"

    def __init__(self, folder: str, schema: Schema, items: list[SourceItem]) -> None:
        # The location is what the plan's fingerprint and the manifest's ``source`` record: the
        # same for every call, so that resume knows a rerun (the spool's folder differs each time).
        super().__init__(LOCATION, SourceOptions())
        self.folder = folder
        self.schema = schema
        self.items = tuple(items)

    def inside(self) -> str:
        return self.folder

    def scan(self) -> SourceIndex:
        label = self.schema.label_field()
        classes = tuple(label.params["classes"]) if label is not None else ()
        return SourceIndex(self.folder, classes, self.items, ScanReport(),
                           schema=tuple(self.schema.to_list()))

    def reader(self) -> ItemReader:
        return SpoolReader(os.path.join(self.folder, SPOOL_NAME))

    def describe(self) -> str:
        return "samples from Python"

    def item_words(self) -> str:
        return "samples"

    def not_packed(self, report: ScanReport) -> str | None:
        return None

    def params(self) -> dict[str, Any]:
        return {}
