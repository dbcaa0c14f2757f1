"""Reading rows of Parquet image tables: the reader shard tasks carry to their workers.

A :class:`ParquetReader` pickles as the file paths and the image column's name. In the process
that reads, it opens one file at a time and decodes one row group's image column at a time,
kept until a row of another group is asked for: a shard's items are rows in order, so each row
group is decoded once per process, and memory holds one row group per process. Every read checks
the row's byte count and digest against the scan's, so a table rewritten under the conversion
is an error, never a wrong image; the count is checked from the column's offsets before the
cell is copied out of Arrow's memory, so no cell over ``max_bytes`` is ever copied. A row whose
image is a file the table names by path (:mod:`packer.source.parquet.paths`) is read from that
file, which must still have the size and mtime the scan saw.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from packer.errors import SourceError
from packer.per_process import PerProcess
from packer.sizes import format_size
from packer.source.base import ItemReader, SourceItem
from packer.source.limits import DEFAULT_MAX_BYTES
from packer.source.parquet.paths import PATH_STATUSES, path_detail, read_image_file, resolve
from packer.source.parquet.schema import (
    EMPTY,
    MISSING_IMAGE,
    NEGATIVE,
    NO_LABEL,
    OUT_OF_RANGE,
    TOO_LARGE,
    UNKNOWN_NAME,
)
from packer.source.sourcefile import UnpackableFile
from packer.source.statuses import FROM_FILE, OK, STATUS_REASONS, skip_reason

__all__ = ["ParquetReader", "digest_of", "open_table"]


def digest_of(data: bytes | memoryview) -> int:
    """A row's identity digest: BLAKE2b of its bytes, 8 bytes as a signed int64."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big", signed=True)


def open_table(path: str) -> pq.ParquetFile:
    """The Parquet file at ``path``, its footer read.

    Raises:
        SourceError: ``path`` is not a Parquet file (or cannot be read); the message says what to do.
    """
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise SourceError(f"{path!r} is not a Parquet file that can be read ({err}): give Parquet tables "
                          "(as the Hugging Face hub ships them), re-download a damaged one, or name the "
                          "kind of source with source_format=. Nothing was written.") from None


def _skip(item: SourceItem, where: str, max_bytes: int, image_path: str | None = None,
          root: str | None = None) -> UnpackableFile:
    """The reason the row behind ``item`` is skipped, from its locator (``image_path``: the
    path the row names, for the statuses about it)."""
    code, value = item.locator[4], item.locator[5]
    if code in PATH_STATUSES:
        detail = path_detail(code, image_path or "", root)
        return UnpackableFile(STATUS_REASONS[code], f"row {item.locator[3]} of {where}: {detail}")
    reasons = {
        MISSING_IMAGE: ("missing_image", "the image has neither bytes nor a path in the table"),
        EMPTY: ("empty_file", "the image has zero bytes"),
        NO_LABEL: ("missing_label", "the label is null"),
        NEGATIVE: ("missing_label", f"the label is {value} (negative: an unlabelled row)"),
        OUT_OF_RANGE: ("missing_label", f"the label {value} is not one of the table's ClassLabel names"),
        UNKNOWN_NAME: ("missing_label", "the label is not one of the table's ClassLabel names"),
        TOO_LARGE: ("too_large", f"the image has {value} bytes, over max_bytes ({format_size(max_bytes)}): "
                                 "raise max_bytes to pack it"),
    }
    reason, detail = reasons[code]
    return UnpackableFile(reason, f"row {item.locator[3]} of {where}: {detail}")


class ParquetReader(ItemReader):
    """Reads rows' image bytes from ``files`` (column path ``leaf``: ``image.bytes`` or a binary
    column ``column``), none over ``max_bytes``; see the module docstring."""

    def __init__(self, files: tuple[str, ...], leaf: str, column: str, *,
                 max_bytes: int = DEFAULT_MAX_BYTES, paths: bool = False, root: str | None = None) -> None:
        self.files = files
        self.leaf = leaf
        self.column = column
        self.max_bytes = max_bytes
        self.paths = paths  # the image column is a struct with a 'path' (read for rows without bytes)
        self.root = root  # root=: where image paths resolve (None: each table's folder)
        self._here: PerProcess[_Opened] = PerProcess(_Opened)  # a forked child opens its own

    def __getstate__(self) -> dict[str, Any]:
        return {"files": self.files, "leaf": self.leaf, "column": self.column, "max_bytes": self.max_bytes,
                "paths": self.paths, "root": self.root}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"max_bytes": DEFAULT_MAX_BYTES, "paths": False, "root": None, **state})
        self._here = PerProcess(_Opened)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ParquetReader) and self.__getstate__() == other.__getstate__()

    def __hash__(self) -> int:
        return hash((self.files, self.leaf))

    def where(self, relpath: str) -> str:
        """The table and the row's key (``train-00000.parquet:cat/1.jpg``)."""
        return f"{self.files[0] if len(self.files) == 1 else os.path.dirname(self.files[0])}:{relpath}"

    def _column(self, opened: _Opened, number: int, group: int) -> pa.Array:
        """Row group ``group`` of file ``number``'s image bytes, decoded once per process."""
        if opened.group is not None and opened.group[:2] == (number, group):
            return opened.group[2]
        opened.group = None
        path = self.files[number]
        try:
            if opened.file is None or opened.file[0] != number:
                opened.file = None
                opened.file = (number, pq.ParquetFile(path))
            table = opened.file[1].read_row_group(group, columns=[self.leaf], use_threads=False)
        except (pa.ArrowException, OSError, IndexError) as err:
            raise SourceError(f"Reading row group {group} of {path!r} failed ({err}): the table changed "
                              "or broke during the conversion. Restore it, then run the same conversion "
                              "again with resume=True (or convert again with overwrite=True).") from None
        column = table.column(0).combine_chunks()
        if self.leaf != self.column:
            column = column.flatten()[0]  # the struct read holds only 'bytes' (null where it is)
        opened.group = (number, group, column)
        return column

    def read(self, item: SourceItem) -> bytes:
        """The row's image bytes; see :meth:`ItemReader.read`."""
        number, group, row = item.locator[:3]
        status = item.locator[4]
        if status == FROM_FILE:
            return self._read_file(item)
        if status != OK:
            path = self._image_path(item) if status in PATH_STATUSES else None
            raise _skip(item, self.files[number], self.max_bytes, path, self.root)
        return self.cell(item, item.size, item.mtime_ns)

    def cell(self, item: SourceItem, size: int, digest: int) -> bytes:
        """This reader's column at the row of ``item``, which the scan saw with ``size`` bytes
        and ``digest`` (:func:`digest_of`).

        Raises:
            SourceError: the cell is not that any more (the table changed under the conversion).
        """
        number, group, row = item.locator[:3]
        opened = self._here.get()
        with opened.lock:
            column = self._column(opened, number, group)
        cell = column[row] if row < len(column) else None
        if cell is None or not cell.is_valid:
            raise self._changed(item, number)
        length = pc.binary_length(cell).as_py()  # from the offsets: nothing copied yet
        if length != size or length > self.max_bytes:
            raise self._changed(item, number)
        data = cell.as_py()
        if digest_of(data) != digest:
            raise self._changed(item, number)
        return bytes(data)

    def sibling(self, leaf: str, column: str) -> ParquetReader:
        """A reader of another binary column of the same rows (``leaf``: its bytes' path)."""
        return ParquetReader(self.files, leaf, column, max_bytes=self.max_bytes)

    def _image_path(self, item: SourceItem) -> str:
        """The image path row ``item`` names in its table (a row group's paths kept per process)."""
        number, group, row = item.locator[:3]
        opened = self._here.get()
        with opened.lock:
            if opened.paths is None or opened.paths[:2] != (number, group):
                opened.paths = None
                self._column(opened, number, group)  # opens the file, or says why it cannot
                handle = opened.file[1] if opened.file is not None else None
                try:
                    table = handle.read_row_group(group, columns=[f"{self.column}.path"], use_threads=False)
                except (pa.ArrowException, OSError, AttributeError):
                    raise self._changed(item, number) from None
                opened.paths = (number, group, table.column(0).combine_chunks().flatten()[0].to_pylist())
            paths = opened.paths[2]
        path = paths[row] if row < len(paths) else None
        if not isinstance(path, str):
            raise self._changed(item, number)
        return path

    def _read_file(self, item: SourceItem) -> bytes:
        """The image file the row names, as the scan found it (size, mtime) and no larger."""
        number = item.locator[0]
        found = resolve(self._image_path(item), os.path.dirname(self.files[number]), self.root)
        if found.status != FROM_FILE or item.size > self.max_bytes:
            raise self._changed(item, number)
        return read_image_file(found.full, item.size, item.locator[5])

    def _changed(self, item: SourceItem, number: int) -> SourceError:
        return SourceError(f"Row {item.locator[3]} of {self.files[number]!r} changed during the "
                           f"conversion (its bytes in column {self.column!r} differ from the scan's): "
                           "convert again with overwrite=True.")

    def known_skip(self, item: SourceItem) -> str | None:
        """The reason a row without a usable label or image is skipped (None for the rest)."""
        return skip_reason(item.locator[4])


class _Opened:
    """One process's open table and decoded row group, and the lock guarding them (``update
    --checksum`` reads from threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.file: tuple[int, pq.ParquetFile] | None = None
        self.group: tuple[int, int, pa.Array] | None = None
        self.paths: tuple[int, int, list[str | None]] | None = None  # a row group's image paths
