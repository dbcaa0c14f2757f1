"""``packer verify --against SRC``: compare every stored sample with its source, byte for byte.

Only for codecs that keep the source bytes. SRC is what the dataset was converted from, of any
kind: a folder (the tree, or a list file's root: each sample is ``SRC/<relative path>``), or a
list file, archive, WebDataset shards or Parquet tables, opened with the options the dataset
recorded and scanned once, each sample then read through the source's own reader.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from typing import Any

from packer.errors import PackerError, SourceError
from packer.format.codecs import codec_class
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
        self._source: Source | None = None
        self._reader: ItemReader
        if os.path.isdir(against) and (manifest.extra.get("source") or {}).get("kind") in (None, "tree",
                                                                                           "list"):
            self._reader = FileReader(against)
            return
        self._source = open_source(against, _recorded_source_options(manifest, against))
        index = self._source.scan()
        self._items = {item.relpath: item for item in index.items}
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
            differ = next((i for i, (a, b) in enumerate(zip(source, payload, strict=False)) if a != b),
                          min(len(source), len(payload)))
            found.add(rel, "source_differs", f"{rel}: stored {len(payload)} bytes, the source has "
                      f"{len(source)}; they first differ at byte {differ}")
        return True
