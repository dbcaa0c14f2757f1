"""``packer verify --against SRC``: compare every stored sample with its source, byte for byte.

Only for codecs that keep the source bytes. SRC is what the dataset was converted from, of any
kind: a folder (the tree, or a list file's root: each sample is ``SRC/<relative path>``), or a
list file, archive, WebDataset shards or Parquet tables, opened with the options the dataset
recorded and scanned once, each sample then read through the source's own reader.

A dataset with fields is compared field by field: the source's values (its image, mask, boxes,
caption, ...) are encoded as the conversion encodes them and each field's stored bytes must
equal them; a difference names the field. Against a bare folder (a tree, or a list's root)
there are no field values to read, so only the image is compared.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from typing import Any

from packer.errors import PackerError, SourceError
from packer.format.codecs import codec_class
from packer.format.fields.encoding import SampleEncoder
from packer.format.fields.record import unpack_record
from packer.format.fields.stored import image_payload
from packer.format.manifest import Manifest
from packer.source.base import ItemReader, Source, SourceItem, SourceOptions
from packer.source.registry import open_source
from packer.source.sourcefile import UnpackableFile
from packer.source.tree import FileReader
from packer.tools.findings import Findings

__all__ = ["SourceComparison", "keeps_source_bytes", "safe_relpath"]


def safe_relpath(path: str) -> bool:
    """A relative POSIX path that stays inside the directory it is joined to."""
    pure = PurePosixPath(path)
    return bool(path) and not pure.is_absolute() and ".." not in pure.parts


def keeps_source_bytes(name: str) -> bool:
    """Whether codec ``name`` stores the source bytes (False for one this packer lacks)."""
    try:
        return codec_class(name).keeps_source_bytes
    except PackerError:
        return False


def _recorded_source_options(manifest: Manifest, against: str) -> SourceOptions:
    """The options the dataset's source was read with (a list file's root only when ``against``
    is that very list: another list's paths are relative to its own folder)."""
    options: dict[str, Any] = dict(manifest.extra.get("options") or {})
    listed = dict(options.get("list") or {})
    source = dict(options.get("source") or {})
    listing = dict(manifest.extra.get("list") or {})
    same_list = listing.get("list") == against
    return SourceOptions(
        format=source.get("format"), include_hidden=bool(options.get("include_hidden", False)),
        allow_empty=True, root=listed.get("root") if same_list else None,
        path_column=listed.get("path_column"), label_column=listed.get("label_column") or
        source.get("label_column"), classes_file=listed.get("classes_file") if same_list else None,
        label_field=source.get("label_field"), image_column=source.get("image_column"),
        drop_unannotated=bool(source.get("drop_unannotated", False)),
        fields=tuple(listed.get("fields") or ()) if same_list else tuple(source.get("fields") or ()))


class SourceComparison:
    """The source of a dataset, opened to compare stored samples with.

    Raises:
        SourceError: SRC cannot be opened or scanned (the message names it).
    """

    def __init__(self, against: str, manifest: Manifest) -> None:
        self.location = against
        self._items: dict[str, SourceItem] | None = None
        self._metadata: dict[str, str] = {}
        self._source: Source | None = None
        self._reader: ItemReader
        self._schema = manifest.schema
        self._encoder = None if self._schema.is_imagefolder() else SampleEncoder(self._schema)
        if os.path.isdir(against) and (manifest.extra.get("source") or {}).get("kind") in (None, "tree",
                                                                                           "list"):
            self._reader = FileReader(against)
            self._encoder = None  # a folder holds the images alone
            return
        self._source = open_source(against, _recorded_source_options(manifest, against))
        index = self._source.scan()
        self._items = {item.relpath: item for item in index.items}
        if index.metadata:
            self._metadata = {item.relpath: text
                              for item, text in zip(index.items, index.metadata, strict=True)}
        self._reader = self._source.reader()

    def close(self) -> None:
        """Release what reading made (an archive's decompressed spool)."""
        if self._source is not None:
            self._source.close()

    def compare(self, rel: str, payload: bytes, found: Findings) -> bool:
        """Compare one stored payload with its source item; True when it was compared."""
        if not safe_relpath(rel):
            found.add(rel, "label_error", f"{rel!r} is not a path inside the source; not compared")
            return False
        if self._items is None:
            item = SourceItem(rel, 0, -1)
        elif rel in self._items:
            item = self._items[rel]
        else:
            found.add(rel, "source_missing", f"{rel} is packed but missing from the source {self.location}")
            return False
        try:
            source = self._reader.read(item)
            if self._encoder is not None:
                values = self._reader.values(item, source, self._metadata.get(rel, ""))
                source = self._encoder.encode(values)
            elif not self._schema.is_imagefolder():
                payload = image_payload(self._schema, payload)
        except UnpackableFile as err:
            if err.reason == "missing":
                found.add(rel, "source_missing", f"{rel} is packed but missing from the source "
                          f"{self.location}")
            else:
                found.add(rel, "source_unreadable", f"{rel} cannot be read from the source: {err}")
            return False
        except (SourceError, OSError) as err:
            if isinstance(err.__cause__, FileNotFoundError | NotADirectoryError):
                found.add(rel, "source_missing", f"{rel} is packed but missing from the source "
                          f"{self.location}")
            else:
                found.add(rel, "source_unreadable", f"{rel} cannot be read from the source: {err}")
            return False
        if source != payload:
            found.add(rel, "source_differs", f"{rel}: {self._difference(source, payload)}")
        return True

    def _difference(self, source: bytes, payload: bytes) -> str:
        """Where a stored record and the source's differ: the first field (with fields), the byte."""
        where = ""
        if self._encoder is not None:
            names = [f.name for f in self._schema.in_record()]
            try:
                pairs = list(zip(unpack_record(source, len(names)), unpack_record(payload, len(names)),
                                 strict=True))
            except ValueError:  # a damaged stored record: compared as a whole
                pairs = []
            number = next((i for i, (a, b) in enumerate(pairs) if bytes(a) != bytes(b)), -1)
            if number >= 0:
                where = f"field {names[number]!r}: "
                source, payload = bytes(pairs[number][0]), bytes(pairs[number][1])
        differ = next((i for i, (a, b) in enumerate(zip(source, payload, strict=False)) if a != b),
                      min(len(source), len(payload)))
        return (f"{where}stored {len(payload)} bytes, the source has {len(source)}; they first differ at "
                f"byte {differ}")
