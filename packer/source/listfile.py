"""A source given as a list file: one image path and one label per sample, in the list's order.

Three formats, told apart by the file's suffix:

* plain text (``.txt``, ``.lst``, anything else): ``relative/path label`` per line, as Caffe's
  ``convert_imageset`` and DALI's ``file_list`` take them; the label is an integer and is
  separated from the path by the last run of whitespace (so paths may hold spaces). Blank lines
  and lines starting with ``#`` are ignored.
* CSV (``.csv``) with a header row, as Hugging Face's ``metadata.csv``;
* JSON Lines (``.jsonl``, ``.ndjson``): one JSON object per line.

CSV and JSON Lines name their columns: the path column is ``path_column`` or the first of
:data:`PATH_COLUMNS` present, the label column ``label_column`` or the first of
:data:`LABEL_COLUMNS`. Every other column is kept as per-sample metadata.

Labels. Strings give the sorted class names, as ImageFolder gives folder names. Integers (every
value of a plain-text list; JSON numbers; CSV values that are all decimal integers) are the
targets themselves: their class names come from ``classes_file`` (one name per line, line ``i``
naming label ``i``) or are the numbers (``"0"``, ``"1"``, ...). A number no sample uses (a gap)
keeps its class, with no samples: labels never shift.

Bad input is an error that names the file, the line and what is wrong, before anything is
written. A path listed twice is an error too (which line repeats which): one file, one sample.
A listed file that does not exist is not an error here: it is skipped as ``missing`` when the
conversion reaches it, and listed with that reason, like a broken image.

The root may be an archive (``--root ILSVRC2012_img_val.tar``; ``.tar``, ``.tar.gz``, ``.tgz``,
``.zip``): listed paths are then member paths, read from the archive without extracting it
(:class:`packer.source.archive.source.ArchiveMembers`); a path the archive lacks is ``missing``.
"""

from __future__ import annotations

import csv
import json
import os
import posixpath
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Final

from packer.errors import SourceError, SourceNotFoundError, UnsafeKeyError
from packer.keys import check_key, check_name
from packer.source.base import ItemReader, ScanReport, Source, SourceIndex, SourceItem
from packer.source.classnames import read_class_names
from packer.source.limits import DEFAULT_MAX_BYTES
from packer.source.listfields import ListFieldReader, list_field_schema, parse_list_fields

__all__ = ["LABEL_COLUMNS", "LIST_FORMATS", "PATH_COLUMNS", "ListFileSource", "ListSource", "list_format",
           "scan_listfile"]

#: Column names tried, in order, for the image path and the label.
PATH_COLUMNS: Final = ("path", "file_name", "filename", "file", "image")
LABEL_COLUMNS: Final = ("label", "class", "target", "category")
#: The formats, by name.
LIST_FORMATS: Final = ("text", "csv", "jsonl")
_INTEGER = re.compile(r"[+-]?\d+\Z")


@dataclass(frozen=True)
class ListSource:
    """A scanned list file: the index every conversion takes, plus what only lists have.

    ``metadata`` holds, per sample in list order, the other columns as a JSON object (text);
    ``metadata_columns`` names them. ``labels_are_numbers`` says how classes were named.
    """

    listfile: str
    format: str
    path_column: str
    label_column: str
    index: SourceIndex
    metadata_columns: tuple[str, ...]
    metadata: tuple[str, ...]
    labels_are_numbers: bool
    classes_file: str | None
    #: The root's archive index when the root is an archive (``ArchiveMembers``), else None.
    archive: Any = None


def list_format(path: str) -> str:
    """``"csv"``, ``"jsonl"`` or ``"text"``, from the file's suffix."""
    suffix = os.path.splitext(path)[1].lower()
    return {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}.get(suffix, "text")


def _fail(listfile: str, line: int | None, what: str) -> SourceError:
    where = f"{listfile!r}, line {line}" if line is not None else repr(listfile)
    return SourceError(f"Bad list file {where}: {what}. Fix the list (nothing was written).")


def _rows(listfile: str, fmt: str, path_column: str | None, label_column: str | None
          ) -> tuple[str, str, list[tuple[int, str, Any, dict[str, Any]]]]:
    """``(path column, label column, [(line, path, raw label, other columns)])``."""
    # utf-8-sig: Excel and Notepad start a UTF-8 file with a byte-order mark, which would
    # otherwise become part of the first path (or the CSV header's first column name).
    with open(listfile, encoding="utf-8-sig", newline="") as handle:
        text = handle.read()
    rows: list[tuple[int, str, Any, dict[str, Any]]] = []
    if fmt == "text":
        for number, line in enumerate(text.splitlines(), 1):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            parts = stripped.rsplit(None, 1)
            if len(parts) != 2:
                raise _fail(listfile, number, f"expected 'relative/path label', got {stripped!r}")
            if not _INTEGER.match(parts[1]):
                raise _fail(listfile, number, f"the label {parts[1]!r} is not an integer (a plain-text "
                                              "list takes integer labels; use CSV or JSON Lines for names)")
            rows.append((number, parts[0], int(parts[1]), {}))
        return "path", "label", rows
    records: Iterator[tuple[int, dict[str, Any]]]
    if fmt == "csv":
        reader = csv.DictReader(text.splitlines())
        if not reader.fieldnames:
            raise _fail(listfile, 1, "no header row (CSV lists name their columns in the first row)")
        records = ((reader.line_num, dict(row)) for row in reader)
        columns: Sequence[str] = reader.fieldnames
    else:
        parsed: list[tuple[int, dict[str, Any]]] = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as err:
                raise _fail(listfile, number, f"not a JSON object ({err})") from None
            if not isinstance(record, dict):
                raise _fail(listfile, number, f"not a JSON object but {type(record).__name__}")
            parsed.append((number, record))
        columns = list(dict.fromkeys(k for _, r in parsed for k in r))
        records = iter(parsed)
    path_key = _column(listfile, columns, path_column, PATH_COLUMNS, "path")
    label_key = _column(listfile, columns, label_column, LABEL_COLUMNS, "label")
    for number, record in records:
        if None in record:  # csv: more fields than the header names
            raise _fail(listfile, number, "more fields than the header has columns")
        path, label = record.get(path_key), record.get(label_key)
        if not isinstance(path, str) or not path:
            raise _fail(listfile, number, f"no {path_key!r} (the image path)")
        if label is None or label == "" or isinstance(label, bool | float | list | dict):
            raise _fail(listfile, number, f"the {label_key!r} must be an integer or a class name, "
                                          f"not {label!r}")
        other = {k: v for k, v in record.items() if k not in (path_key, label_key)}
        rows.append((number, path, label, other))
    return path_key, label_key, rows


def _column(listfile: str, columns: Sequence[str], given: str | None, defaults: Sequence[str],
            what: str) -> str:
    if given is not None:
        if given not in columns:
            raise _fail(listfile, None, f"no {what} column {given!r}; its columns are {list(columns)}")
        return given
    for name in defaults:
        if name in columns:
            return name
    raise _fail(listfile, None, f"no {what} column: name it with --{what}-column (tried "
                                f"{', '.join(defaults)}; its columns are {list(columns)})")


def _relpath(listfile: str, number: int, path: str) -> str:
    """The listed path as a clean relative POSIX path inside the root."""
    clean = posixpath.normpath(path.replace("\\", "/"))
    if posixpath.isabs(clean) or clean == ".." or clean.startswith("../") or clean == ".":
        raise _fail(listfile, number, f"the path {path!r} is not relative to the root (it must lie "
                                      "inside it)")
    return check_key(clean, source=f"{listfile}, line {number},", what="path")


def _classes(listfile: str, rows: list[tuple[int, str, Any, dict[str, Any]]], fmt: str,
             classes_file: str | None) -> tuple[tuple[str, ...], list[int], bool]:
    """Class names, each row's label and whether labels were numbers."""
    raw = [label for _, _, label, _ in rows]
    numbers = all(isinstance(v, int) or (fmt == "csv" and _INTEGER.match(str(v))) for v in raw)
    if not numbers:
        if any(isinstance(v, int) for v in raw):
            line = next(n for n, _, v, _ in rows if isinstance(v, int))
            raise _fail(listfile, line, "labels mix numbers and class names: use one kind")
        if classes_file is not None:
            raise _fail(listfile, None, "classes_file= names integer labels, but this list's labels are "
                                        "class names already")
        classes = tuple(sorted(set(map(str, raw))))
        for name in classes:  # each becomes a folder name (export): one safe name, or refused
            try:
                check_name(name, source=listfile, what="label")
            except UnsafeKeyError:
                line = next(n for n, _, v, _ in rows if str(v) == name)
                check_name(name, source=f"{listfile}, line {line},", what="label")
        position = {name: i for i, name in enumerate(classes)}
        return classes, [position[str(v)] for v in raw], False
    targets = [int(v) for v in raw]
    for (number, _, _, _), target in zip(rows, targets, strict=True):
        if target < 0:
            raise _fail(listfile, number, f"the label {target} is negative")
    top = max(targets, default=-1)
    if classes_file is None:
        return tuple(str(i) for i in range(top + 1)), targets, True
    names = read_class_names(classes_file)
    if top >= len(names):
        line = next(n for (n, _, _, _), t in zip(rows, targets, strict=True) if t == top)
        raise _fail(listfile, line, f"the label {top} has no name: {classes_file!r} names "
                                    f"{len(names)} classes (labels 0 to {len(names) - 1})")
    return names, targets, True


def scan_listfile(listfile: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None,
                  path_column: str | None = None, label_column: str | None = None,
                  classes_file: str | os.PathLike[str] | None = None,
                  max_bytes: int = DEFAULT_MAX_BYTES) -> ListSource:
    """Read the list ``listfile`` (paths relative to ``root``, default: the list's directory).

    Nothing is opened but the list (and ``classes_file``); each listed file is only stat'ed.
    A root that is an archive file has its member headers read instead (see the module docstring),
    and its members are read within ``max_bytes`` each (:mod:`packer.source.limits`).

    Raises:
        SourceNotFoundError: the list, the root or the classes file cannot be read.
        SourceError: a malformed line (the message names the file, the line and what is wrong),
            a path listed twice, labels that mix kinds, or an empty list.
    """
    path = os.path.abspath(os.fspath(listfile))
    if not os.path.isfile(path):
        raise SourceNotFoundError(f"List file {path!r} does not exist or is not a file.")
    top = os.path.abspath(os.fspath(root)) if root is not None else os.path.dirname(path)
    archive = None
    if root is not None and _is_archive(top):
        from packer.source.archive.source import ArchiveMembers
        archive = ArchiveMembers(top, max_bytes=max_bytes)
    elif not os.path.isdir(top):
        raise SourceNotFoundError(f"The root {top!r} of list {path!r} is not a directory or an archive: "
                                  "give root=, the folder (or .tar, .tar.gz, .zip) the listed paths "
                                  "are relative to.")
    fmt = list_format(path)
    try:
        path_key, label_key, rows = _rows(path, fmt, path_column, label_column)
    except UnicodeDecodeError as err:
        raise _fail(path, None, f"not UTF-8 text ({err.reason} at byte {err.start})") from None
    except csv.Error as err:
        raise _fail(path, None, f"not valid CSV ({err})") from None
    if not rows:
        raise SourceError(f"List file {path!r} lists no image: nothing to convert.")
    classes_path = os.path.abspath(os.fspath(classes_file)) if classes_file is not None else None
    classes, targets, numbers = _classes(path, rows, fmt, classes_path)
    seen: dict[str, int] = {}
    items = []
    for (number, listed, _, _), target in zip(rows, targets, strict=True):
        relpath = _relpath(path, number, listed)
        if relpath in seen:
            raise _fail(path, number, f"{relpath!r} is listed again (first on line {seen[relpath]}): "
                                      "list each file once")
        seen[relpath] = number
        if archive is not None:
            items.append(archive.item(relpath, target))
            continue
        try:
            status = os.stat(os.path.join(top, *relpath.split("/")))
            size, mtime = status.st_size, status.st_mtime_ns
        except OSError:
            size, mtime = -1, -1
        items.append(SourceItem(relpath, target, size, mtime))
    metadata_columns = tuple(dict.fromkeys(k for _, _, _, other in rows for k in other))
    metadata = tuple(json.dumps(other, sort_keys=True, ensure_ascii=False) for _, _, _, other in rows)
    report = ScanReport(notes=archive.notes) if archive is not None else ScanReport()
    index = SourceIndex(top, classes, tuple(items), report, metadata=metadata,
                        metadata_columns=metadata_columns)
    return ListSource(path, fmt, path_key, label_key, index, metadata_columns, metadata, numbers,
                      classes_path, archive)


def _is_archive(path: str) -> bool:
    from packer.source.archive.source import is_archive_file
    return is_archive_file(path)


class ListFileSource(Source):
    """A list file of image paths and labels (see the module docstring), files under ``--root``."""

    kind: ClassVar[str] = "list"
    takes: ClassVar[frozenset[str]] = frozenset({"root", "path_column", "label_column", "classes_file",
                                                  "fields",
                                                  "include_hidden"})  # include_hidden: ignored, as ever

    def __init__(self, location: str, options: Any) -> None:
        if options.is_valid_file is not None:
            raise ValueError("is_valid_file filters a folder tree; a list source packs what it lists "
                             "(filter the list instead)")
        super().__init__(location, options)
        self.listed: ListSource | None = None

    def scan(self) -> SourceIndex:
        """:func:`scan_listfile` with this source's options."""
        return self._scanned().index

    def reader(self) -> ItemReader:
        """Reads the listed files under the root (or members of the root archive); a listed file
        that is not there is ``missing``."""
        listed = self._scanned()
        if listed.archive is not None:
            inner: ItemReader = listed.archive.reader()
        else:
            from packer.source.tree import FileReader
            inner = FileReader(listed.index.root, listed=True)
        fields = parse_list_fields(self.options.fields, listfile=self.location)
        return ListFieldReader(inner, fields, listed.format == "csv") if fields else inner

    def _scanned(self) -> ListSource:
        if self.listed is None:
            options = self.options
            self.listed = scan_listfile(self.location, root=options.root, path_column=options.path_column,
                                        label_column=options.label_column,
                                        classes_file=options.classes_file,
                                        max_bytes=options.max_bytes)
            fields = parse_list_fields(options.fields, listfile=self.location)
            if fields:
                if self.listed.format == "text":
                    raise SourceError(f"List file {self.location!r} is plain text: it has no columns to "
                                      "make fields of (fields= needs a CSV or JSON Lines list).")
                schema = list_field_schema(fields, self.listed.metadata_columns, self.location)
                self.listed = replace(self.listed, index=replace(self.listed.index, schema=schema))
        return self.listed

    def describe(self) -> str:
        """A list file, and its format."""
        return f"a list file ({list_format(self.location)})"

    def close(self) -> None:
        """Delete the decompressed spool of a ``.tar.gz`` root, if this node made one."""
        if self.listed is not None and self.listed.archive is not None:
            self.listed.archive.close()

    def inside(self) -> str:
        """The root the listed paths lie under."""
        return self.options.root or os.path.dirname(self.location)

    def manifest_extra(self) -> dict[str, Any]:
        """What the manifest records of the list (``extra.list``)."""
        listed = self._scanned()
        return {"list": {"list": listed.listfile, "format": listed.format, "root": listed.index.root,
                "path_column": listed.path_column, "label_column": listed.label_column,
                "classes_file": listed.classes_file,
                "labels": "numbers" if listed.labels_are_numbers else "names",
                "metadata_columns": list(listed.metadata_columns)}}
