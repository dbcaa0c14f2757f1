"""Parquet image tables as a source (as the Hugging Face hub ships them), never extracted.

SRC is one ``.parquet`` file, a folder of them (by name) or a glob / brace pattern; samples are
the rows, files in order and rows in order. :mod:`packer.source.parquet.schema` chooses the
columns and the classes: a table's ClassLabel names (unused names keep their class, with no
samples, like a list file's gaps; every file must give the same names), else integer labels
(classes ``"0"`` to the largest), else class names sorted as ImageFolder sorts folders.

Scanning reads the label column, the other scalar columns (kept per sample as metadata, text
cut to 64 KiB) and the image column once, one row group at a time, so memory stays bounded by one
row group: a row's identity is its byte count and a digest of its bytes (BLAKE2b, 8 bytes as a
signed int64, in the ``mtime_ns`` slot; a row has no mtime). A row without image bytes whose
``path`` names a file (as ``datasets``' ``to_parquet()`` writes a dataset built from files) is
read from that file, on the rules of :mod:`packer.source.parquet.paths` (relative paths under
``root=`` or the table's folder, absolute ones only under ``root=``); its identity is then the
file's size and a digest of the path and the file's mtime. A row's key is its image ``path``
when every row has one, all relative and different; else ``<file>/<row:08d><suffix>``
(``<file>``: the file's path below the files' common folder, without ``.parquet``).

A row that cannot be a sample is still an item, listed as skipped when the conversion reaches it:
a null image (and no path) ``missing_image``, a path that names no file ``missing``, empty bytes
``empty_file``, more bytes than ``max_bytes``
``too_large`` (told from the column's offsets: the cell is never copied; it counts as
``max_bytes + 1`` bytes in plans), a null label, a negative one (how Hugging Face marks
unlabelled rows), one outside the ClassLabel names or an unknown name ``missing_label``. Such
items carry label 0, never used (a skipped item has no target), and an identity marked by the
reason, so a row that gets its label later is a changed input. ``fields=`` makes columns typed
fields instead of metadata (:mod:`packer.source.parquet.fields`); the label is then optional.
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

import pyarrow as pa
import pyarrow.parquet as pq

from packer.errors import EmptySourceError, SourceError, SourceNotFoundError
from packer.source.base import ItemReader, ScanReport, Source, SourceIndex, SourceItem, SourceOptions
from packer.source.fieldspecs import FieldSpec
from packer.source.limits import DEFAULT_MAX_BYTES
from packer.source.parquet import fields as table_fields
from packer.source.parquet.cells import binary_cells
from packer.source.parquet.paths import locate_image
from packer.source.parquet.read import ParquetReader, digest_of, open_table
from packer.source.parquet.schema import (
    EMPTY,
    LABEL_CODES,
    MISSING_IMAGE,
    OK,
    TOO_LARGE,
    TableLayout,
    image_suffix,
    json_value,
    label_targets,
    table_layout,
)
from packer.source.registry import expand_pattern
from packer.source.statuses import (
    FROM_FILE,
    LABEL_OUT_OF_RANGE,
    MISSING_LABEL,
    NEGATIVE_LABEL,
    UNKNOWN_LABEL_NAME,
)

__all__ = ["ParquetReader", "ParquetSource", "parquet_files"]

#: The number each label status is hashed with in a row's identity: the numbers this module used
#: before statuses were shared (:mod:`packer.source.statuses`), so recorded identities still match.
_IDENTITY_CODES: Final = {MISSING_LABEL: 3, NEGATIVE_LABEL: 4, LABEL_OUT_OF_RANGE: 5, UNKNOWN_LABEL_NAME: 6}

#: Rows decoded at a time while scanning (memory: at most one row group's column chunks).
_BATCH_ROWS = 256


def parquet_files(location: str) -> list[str]:
    """The Parquet files ``location`` names (a file, a folder of them, a pattern), in order.

    Raises:
        SourceNotFoundError: nothing is there, or the pattern or folder names no file.
        SourceError: a folder that holds other things than ``.parquet`` files.
    """
    if os.path.isdir(location):
        names = sorted(n for n in os.listdir(location) if not n.startswith("."))
        others = [n for n in names
                  if not (n.endswith(".parquet") and os.path.isfile(os.path.join(location, n)))]
        if others:
            raise SourceError(f"The folder {location!r} holds {others[0]!r}, which is not a .parquet file: "
                              f"give the files as a pattern ({os.path.join(location, '*.parquet')!r}).")
        if not names:
            raise SourceNotFoundError(f"The folder {location!r} holds no .parquet file.")
        return [os.path.join(location, n) for n in names]
    if os.path.isfile(location):
        return [location]
    found = [os.path.abspath(p) for p in expand_pattern(location)] if location else []
    missing = [p for p in found if not os.path.isfile(p)]
    if not found or missing or found == [os.path.abspath(location)]:
        what = f"names {missing[0]!r}, which is not a file" if missing else "matches no file"
        raise SourceNotFoundError(f"Parquet source {location!r} {what}: give a .parquet file, a folder of "
                                  "them, or a pattern (train-*.parquet, train-{00000..00009}.parquet).")
    return found


@dataclass
class _Rows:
    """What scanning gathered, one entry per row in sample order."""

    locators: list[tuple[int, int, int, int]] = field(default_factory=list)  # file, group, row, row in file
    sizes: list[int] = field(default_factory=list)
    digests: list[int] = field(default_factory=list)
    images: list[int] = field(default_factory=list)  # a status: OK, FROM_FILE or why not
    file_mtimes: dict[int, int] = field(default_factory=dict)  # row number -> its image file's mtime
    suffixes: list[str] = field(default_factory=list)
    paths: list[str | None] = field(default_factory=list)
    labels: list[Any] = field(default_factory=list)
    metadata: list[str] = field(default_factory=list)
    cut_texts: dict[str, int] = field(default_factory=dict)
    fields: tuple[FieldSpec, ...] = ()  # fields=: each row's values go to ``records``
    records: list[str] = field(default_factory=list)


def _scan_file(number: int, path: str, handle: pq.ParquetFile, layout: TableLayout, rows: _Rows,
               max_bytes: int, root: str | None) -> None:
    """Append the rows of one file, a batch at a time (images over ``max_bytes``: ``TOO_LARGE``)."""
    labelled = [layout.label_column] if layout.label_column is not None else []
    columns = [layout.image_column, *labelled, *layout.metadata_columns,
               *table_fields.field_columns(rows.fields)]
    row_in_file = 0
    for group in range(handle.metadata.num_row_groups):
        row = 0
        try:
            batches = list(handle.iter_batches(batch_size=_BATCH_ROWS, row_groups=[group], columns=columns,
                                               use_threads=False))
        except (pa.ArrowException, OSError) as err:
            raise SourceError(f"Reading row group {group} of the Parquet file {path!r} failed ({err}): "
                              "repair or re-download the file. Nothing was written.") from None
        for batch in batches:
            image = batch.column(layout.image_column)
            paths: list[str | None] = [None] * batch.num_rows
            if layout.image_field is not None:
                parts = dict(zip([f.name for f in image.type], image.flatten(), strict=True))
                if layout.has_path:
                    paths = parts["path"].to_pylist()
                image = parts["bytes"]
            first = len(rows.images)
            _add_images(image, rows, max_bytes)
            if layout.has_path:
                _add_files(rows, first, paths, os.path.dirname(path), root, max_bytes)
            label = batch.column(layout.label_column) if labelled else pa.nulls(batch.num_rows)
            if pa.types.is_dictionary(label.type):
                label = label.dictionary_decode()
            rows.labels += label.to_pylist()
            rows.paths += paths
            _add_metadata(batch, layout, rows)
            rows.records += table_fields.field_records(batch, rows.fields, max_bytes) if rows.fields else []
            for _ in range(batch.num_rows):
                rows.locators.append((number, group, row, row_in_file))
                row += 1
                row_in_file += 1


def _add_images(column: pa.Array, rows: _Rows, max_bytes: int) -> None:
    """Sizes, digests and suffixes of a batch's image bytes, hashed in place (no copy; a cell
    over ``max_bytes`` is told from the column's offsets)."""
    for value in binary_cells(column):
        rows.sizes.append(0 if value is None else len(value))
        rows.digests.append(-1 if value is None else digest_of(value))
        rows.images.append(MISSING_IMAGE if value is None else EMPTY if not len(value) else
                           TOO_LARGE if len(value) > max_bytes else OK)
        rows.suffixes.append("" if value is None else image_suffix(value))


def _add_files(rows: _Rows, first: int, paths: list[str | None], folder: str, root: str | None,
               max_bytes: int) -> None:
    """Rows from ``first`` on without image bytes but with a path: their file's status, size
    and identity (:mod:`packer.source.parquet.paths`; nothing read but ``stat``)."""
    for i, path in enumerate(paths, start=first):
        if rows.images[i] != MISSING_IMAGE or not path:
            continue
        found = locate_image(path, folder, root, max_bytes)
        rows.images[i] = found.status
        rows.sizes[i] = found.size
        rows.digests[i] = digest_of(b"file|%s|%d" % (path.encode("utf-8", "surrogateescape"), found.mtime_ns))
        if found.status == FROM_FILE:
            rows.file_mtimes[i] = found.mtime_ns


def _add_metadata(batch: pa.RecordBatch, layout: TableLayout, rows: _Rows) -> None:
    if not layout.metadata_columns:
        return
    values = [batch.column(name).to_pylist() for name in layout.metadata_columns]
    for cells in zip(*values, strict=True):
        record = {}
        for name, cell in zip(layout.metadata_columns, cells, strict=True):
            record[name], cut = json_value(cell)
            if cut:
                rows.cut_texts[name] = rows.cut_texts.get(name, 0) + 1
        rows.metadata.append(json.dumps(record, sort_keys=True, ensure_ascii=False))


def _relpaths(files: list[str], rows: _Rows) -> tuple[list[str], str | None]:
    """Each row's key, and a note when the rows' image paths could not be the keys."""
    clean = [_clean(p) for p in rows.paths]
    if clean and all(clean) and len(set(clean)) == len(clean):
        return [c for c in clean if c], None
    base = os.path.commonpath([os.path.dirname(f) for f in files])
    stems = [os.path.relpath(f, base).replace(os.sep, "/").removesuffix(".parquet") for f in files]
    keys = []
    for (number, _, _, row), path, suffix in zip(rows.locators, rows.paths, rows.suffixes, strict=True):
        ext = posixpath.splitext(path)[1] if path and posixpath.splitext(path)[1] else suffix
        keys.append(f"{stems[number]}/{row:08d}{ext}")
    if not any(rows.paths):
        return keys, None
    why = ("some rows have none" if not all(rows.paths) else "some are not relative paths inside a folder"
           if not all(clean) else "they are not all different")
    return keys, (f"Samples are named <file>/<row><suffix>, not by their image paths: {why} (the paths "
                  "are kept as the metadata field 'image_path').")


def _clean(path: str | None) -> str | None:
    if not path:
        return None
    clean = posixpath.normpath(path.replace("\\", "/"))
    if posixpath.isabs(clean) or clean in (".", "..") or clean.startswith("../"):
        return None
    return clean


def _with_image_paths(rows: _Rows) -> list[str]:
    """Each row's metadata with its image path added (``image_path``), when paths are not keys."""
    records = [json.loads(m) for m in rows.metadata] if rows.metadata else [{} for _ in rows.paths]
    for record, path in zip(records, rows.paths, strict=True):
        record["image_path"] = path
    return [json.dumps(r, sort_keys=True, ensure_ascii=False) for r in records]


def scan_parquet(files: list[str], *, image_column: str | None, label_column: str | None,
                 max_bytes: int = DEFAULT_MAX_BYTES, root: str | None = None,
                 fields: tuple[FieldSpec, ...] = ()) -> tuple[SourceIndex, TableLayout]:
    """Index the rows of ``files`` (see the module docstring); reads no image twice, and an
    image over ``max_bytes`` is ``too_large``; image paths resolve under ``root`` (absolute)
    or each table's folder; ``fields`` (:mod:`packer.source.parquet.fields`) kept per row.

    Raises:
        SourceError: a file that is not Parquet, lacks the columns or disagrees with the first
            on them; the message names the file and the fix.
        EmptySourceError: the tables hold no row.
    """
    rows = _Rows(fields=fields)
    layout: TableLayout | None = None
    first_schema = pa.schema([])
    for number, path in enumerate(files):
        handle = open_table(path)
        try:
            table_fields.check_columns(fields, handle.schema_arrow, path)
            mine = table_layout(path, handle.schema_arrow, image_column=image_column,
                                label_column=label_column, claimed=table_fields.field_columns(fields))
            if layout is None:
                layout, first_schema = mine, handle.schema_arrow
            elif (why := layout.differs(mine) or table_fields.cells_differ(fields, first_schema,
                                                                             handle.schema_arrow)):
                raise SourceError(f"The Parquet file {path!r} does not match {files[0]!r}: {why}. Convert "
                                  "files of one table together (nothing was written).")
            _scan_file(number, path, handle, mine, rows, max_bytes, root)
        finally:
            handle.close()
    named = repr(files[0]) if len(files) == 1 else f"({len(files)} files: {files[0]!r}, ...)"
    if layout is None or not rows.locators:
        raise EmptySourceError(f"The Parquet source {named} holds no row: nothing to convert.")
    classes, labelled = label_targets(layout, rows.labels)
    if not classes and layout.label_column is not None:
        raise EmptySourceError(f"No row of the Parquet source {named} has a usable label in the column "
                               f"{layout.label_column!r} (all null or negative): name the label column "
                               "with label_column=.")
    relpaths, note = _relpaths(files, rows)
    notes = [note] if note else []
    metadata_columns = layout.metadata_columns
    metadata = rows.metadata
    if note and "image_path" not in metadata_columns:
        metadata_columns, metadata = (*metadata_columns, "image_path"), _with_image_paths(rows)
    for name, count in sorted(rows.cut_texts.items()):
        notes.append(f"{count} value(s) of the column {name!r} were cut to 64 KiB of text in the metadata.")
    if layout.left_out:
        notes.append(f"The columns {list(layout.left_out)} hold binary or nested values: not kept as "
                     "metadata." if not fields else f"The columns {list(layout.left_out)} are no field: not "
                     "kept (keep them with fields=, COLUMN:TYPE).")
    items = []
    for i, relpath in enumerate(relpaths):
        target, label_code = labelled[i]
        readable = rows.images[i] in (OK, FROM_FILE)
        code = label_code if readable and label_code != OK else rows.images[i]
        digest = rows.digests[i]
        if code in LABEL_CODES:
            digest = digest_of(b"%d|%d|%d" % (_IDENTITY_CODES[code], target, digest))
        value = (target if code in LABEL_CODES else rows.sizes[i] if code == TOO_LARGE
                 else rows.file_mtimes[i] if code == FROM_FILE else 0)
        size = min(rows.sizes[i], max_bytes + 1)  # a plan never counts more than the bound
        items.append(SourceItem(relpath, target if code in (OK, FROM_FILE) else 0, size, digest,
                                (*rows.locators[i], code, value)))
    schema = ()
    if fields:  # the rows' field values ride with the items (not stored as metadata)
        metadata, metadata_columns = rows.records, ()
        schema = table_fields.parquet_field_schema(fields, first_schema,
                                                   classes if layout.label_column is not None else None)
    index = SourceIndex(os.path.commonpath(files) if len(files) > 1 else files[0], classes, tuple(items),
                        ScanReport(notes=tuple(notes)), metadata=tuple(metadata),
                        metadata_columns=tuple(metadata_columns), schema=schema)
    return index, layout


def _image_root(root: str | None) -> str | None:
    """``root=`` as an absolute folder, or None.

    Raises:
        SourceNotFoundError: ``root`` is no folder.
    """
    if root is None:
        return None
    full = os.path.abspath(root)
    if not os.path.isdir(full):
        raise SourceNotFoundError(f"root={root!r} is no folder: give root= the folder that holds the images "
                                  "a Parquet table names by path. Nothing was written.")
    return full


class ParquetSource(Source):
    """Parquet image tables: one file, a folder of them or a pattern (see the module docstring)."""

    kind: ClassVar[str] = "parquet"
    takes: ClassVar[frozenset[str]] = frozenset({"image_column", "label_column", "root", "fields"})

    def __init__(self, location: str, options: SourceOptions) -> None:
        super().__init__(location, options)
        self.fields = table_fields.parse_parquet_fields(options.fields, where=location)
        self.files = parquet_files(location)
        self.max_bytes = options.max_bytes
        self.root = _image_root(options.root)
        self._scanned: tuple[SourceIndex, TableLayout] | None = None

    def _scan(self) -> tuple[SourceIndex, TableLayout]:
        if self._scanned is None:
            self._scanned = scan_parquet(self.files, image_column=self.options.image_column,
                                         label_column=self.options.label_column, max_bytes=self.max_bytes,
                                         root=self.root, fields=self.fields)
        return self._scanned

    def scan(self) -> SourceIndex:
        """:func:`scan_parquet` of this source's files, once."""
        return self._scan()[0]

    def reader(self) -> ItemReader:
        """Reads rows' image bytes, a row group at a time per process (and gives their fields)."""
        layout = self._scan()[1]
        images = ParquetReader(tuple(self.files), layout.image_leaf, layout.image_column,
                               max_bytes=self.max_bytes, paths=layout.has_path, root=self.root)
        if not self.fields:
            return images
        with open_table(self.files[0]) as handle:  # the scan checked the others agree
            cells = table_fields.binary_leaves(self.fields, handle.schema_arrow)
        return table_fields.ParquetFieldReader(images, self.fields, cells)

    def item_words(self) -> str:
        """A Parquet source's items are its rows."""
        return "rows"

    def not_packed(self, report: ScanReport) -> str | None:
        """Nothing beyond the notes: they say what of the tables was not kept."""
        return None

    def describe(self) -> str:
        """``Parquet tables (3 files)``."""
        return f"Parquet tables ({len(self.files)} file{'s' if len(self.files) != 1 else ''})"

    def inside(self) -> str:
        """The file, the folder, or for a pattern the folder its files share (DST may not hold it)."""
        if len(self.files) == 1 or os.path.isdir(self.location):
            return self.location if os.path.exists(self.location) else self.files[0]
        return os.path.commonpath([os.path.dirname(f) for f in self.files])

    def params(self) -> dict[str, Any]:
        """The columns chosen, how labels became classes, and the number of files."""
        layout = self._scan()[1]
        return {"image_column": layout.image_column, "label_column": layout.label_column,
                "labels": layout.label_kind, "files": len(self.files)}
