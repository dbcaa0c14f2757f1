"""The source protocol: what a kind of input says about its items, and how one is read.

A :class:`Source` (a folder tree, a list file, an archive, WebDataset shards, Parquet tables)
scans into a :class:`SourceIndex`: the classes, the items in sample order and a report of what
was seen but not taken. An item (:class:`SourceItem`) has a key (``relpath``, unique, the
sample's path in the dataset), a label, an identity that ``resume`` and ``update`` compare
(``size`` and ``mtime_ns``: a file's or an archive member's as the archive records them; a
Parquet row's size and a digest of its bytes) and a locator that only its reader understands.
An :class:`ItemReader` reads one item's bytes; it pickles small (a path and a few numbers) and
opens files lazily in the process that reads, so shard tasks carry it to any worker or machine.
Planning, change detection and the engines see only items, identities and readers.

A source whose samples hold more than an image and a class (boxes, masks, captions) says so in
its index's ``schema`` (the fields, in the JSON form of
:class:`packer.format.fields.schema.Schema`: this layer knows no field types) and its reader's
:meth:`ItemReader.values` gives each item's values; an ImageFolder-like source leaves both alone.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from packer.digests import SHA256, DigestAlgorithm
from packer.errors import SourceError
from packer.keys import check_key, check_name, is_safe_key
from packer.source.imagecheck import image_dimensions
from packer.source.limits import DEFAULT_MAX_BYTES
from packer.source.sourcefile import UnpackableFile

__all__ = ["ItemReader", "ScanReport", "Source", "SourceIndex", "SourceItem", "SourceOptions"]


@dataclass(frozen=True, slots=True)
class SourceItem:
    """One image of the source; nothing has been read from it yet.

    ``relpath`` is the sample's key, a POSIX path (``"cat/sub/0001.jpg"``); ``size`` and
    ``mtime_ns`` are its identity (-1 when unknown): ``resume`` and ``update`` redo a shard when
    they change. ``locator`` says where its reader finds the bytes (empty for a file under the
    source's root; a byte offset in an archive; a file and row of a table).
    """

    relpath: str
    label: int
    size: int
    mtime_ns: int = -1
    locator: tuple[int, ...] = ()

    @property
    def identity(self) -> tuple[str, int, int]:
        """What ``update`` compares, label-free: key, size and modification time (or digest)."""
        return self.relpath, self.size, self.mtime_ns


@dataclass(frozen=True, slots=True)
class ScanReport:
    """What the scan saw but did not turn into samples, so that nothing goes unmentioned."""

    ignored_hidden: tuple[str, ...] = ()
    cut_symlink_loops: tuple[str, ...] = ()
    unreadable_dirs: tuple[str, ...] = ()
    other_files: int = 0
    root_files: int = 0
    #: What else a kind of source saw, one sentence each (an archive that ends early, members
    #: that are neither images nor labels); recorded in the manifest's ``extra.source.report``.
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SourceIndex:
    """Result of scanning a source; the same source always gives the same index.

    ``root`` is where the items' relative paths point (a tree's root; a list's ``--root``; an
    archive's path); ``metadata`` holds, per item, other fields kept for each sample (a JSON
    object as text, named by ``metadata_columns``), or is empty.
    """

    root: str
    classes: tuple[str, ...]
    items: tuple[SourceItem, ...]
    report: ScanReport
    include_hidden: bool = False
    metadata: tuple[str, ...] = ()
    metadata_columns: tuple[str, ...] = ()
    #: The fields of every sample (``[{"name", "type", "params"}, ...]``), or empty for
    #: ImageFolder's ``{image, label}``. An ``image`` field's codec is the conversion's to choose.
    schema: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        """Every class becomes a folder (export) and every path a key: each kind of source
        passes this one check (:mod:`packer.keys`), so a crafted list, archive or table is
        refused before anything is written."""
        for name in self.classes:
            check_name(name, source=self.root, what="class")
        for item in self.items:
            if not is_safe_key(item.relpath):
                check_key(item.relpath, source=self.root, what="item path")

    @property
    def class_to_idx(self) -> dict[str, int]:
        """Class name to label, as torchvision's ``ImageFolder.class_to_idx``."""
        return {name: i for i, name in enumerate(self.classes)}

    def path_of(self, item: SourceItem) -> str:
        """Path of ``item`` joined to the root (a real file only for folder sources)."""
        return os.path.join(self.root, *item.relpath.split("/"))


class ItemReader(ABC):
    """Reads items of one source; picklable, opening nothing until the first read."""

    @abstractmethod
    def read(self, item: SourceItem) -> bytes:
        """The item's encoded bytes.

        Raises:
            UnpackableFile: it cannot be packed (the reason is one of ``SKIP_REASONS``).
            SourceError: the source changed or failed under the conversion (an I/O error);
                the message says how to go on.
        """

    @abstractmethod
    def where(self, relpath: str) -> str:
        """Where the item ``relpath`` lies, for messages (a path, ``archive.tar:cat/1.jpg``)."""

    def values(self, item: SourceItem, data: bytes, metadata: str) -> dict[str, Any]:
        """The values of the item's in-record fields (its index's ``schema``), given the bytes
        :meth:`read` returned and the item's ``metadata`` (``""`` when the index has none).
        The class label is the item's own. Default: ``{"image": data}``, ImageFolder's sample.

        Raises:
            UnpackableFile: a value cannot be had (a mask file missing); the sample is skipped.
            SourceError: as :meth:`read`.
        """
        return {"image": data}

    def known_skip(self, item: SourceItem) -> str | None:
        """The skip reason the scan already knows for ``item`` (a WebDataset sample or table
        row without a label or image), or None: dry runs count these apart from the classes."""
        return None

    def dimensions(self, item: SourceItem) -> tuple[int, int] | None:
        """Width and height from the item's header (nothing decoded), or None if unreadable;
        planning codecs that re-encode uses it."""
        try:
            data = self.read(item)
        except (OSError, SourceError, ValueError, UnpackableFile):
            return None
        return image_dimensions(data)

    def digest(self, item: SourceItem, algorithm: DigestAlgorithm = SHA256) -> str:
        """The item's digest by ``algorithm`` (hex; the dataset's, :mod:`packer.digests`),
        ``""`` when it cannot be read (``update --checksum``)."""
        try:
            return algorithm.hex(self.read(item))
        except (OSError, SourceError, ValueError, UnpackableFile):
            return ""


@dataclass(frozen=True)
class SourceOptions:
    """The options that say how to read SRC (none of them changes how images are stored).

    Each kind of source takes some of them (:attr:`Source.takes`); giving one the chosen kind
    does not take is an error that names the flag.
    """

    format: str | None = None  # the kind of source; None: detect it
    include_hidden: bool = False
    allow_empty: bool = False
    is_valid_file: Any = field(default=None, compare=False)  # Callable[[str], bool] | None
    root: str | None = None
    path_column: str | None = None
    label_column: str | None = None
    classes_file: str | None = None
    label_field: str | None = None
    image_column: str | None = None
    drop_unannotated: bool = False  # a COCO file's images without annotations are skipped
    fields: tuple[str, ...] = ()  # columns or members as typed fields, "[NAME=]KEY:TYPE" (fieldspecs)
    max_bytes: int = DEFAULT_MAX_BYTES  # the most bytes of one item read (packer.source.limits)

    def __post_init__(self) -> None:
        if self.max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, not {self.max_bytes}")

    def given(self) -> dict[str, Any]:
        """The options set to something other than their default, by name."""
        defaults = SourceOptions()
        return {name: getattr(self, name) for name in _OPTION_FLAGS
                if getattr(self, name) != getattr(defaults, name)}


#: Each source option as messages name it (the command line shows its flag instead).
_OPTION_FLAGS: Mapping[str, str] = {
    "include_hidden": "include_hidden=True", "allow_empty": "allow_empty=True",
    "is_valid_file": "is_valid_file=", "root": "root=", "path_column": "path_column=",
    "label_column": "label_column=", "classes_file": "classes_file=", "label_field": "label_field=",
    "image_column": "image_column=", "drop_unannotated": "drop_unannotated=True",
    "fields": "fields=",
}

#: Which kinds take each option, for messages.
_OPTION_KINDS: Mapping[str, str] = {
    "include_hidden": "tree, archive, masks or YOLO", "is_valid_file": "tree",
    "root": "list file or Parquet", "path_column": "list file", "label_column": "list file or Parquet",
    "classes_file": "list file, masks, YOLO or WebDataset",
    "label_field": "WebDataset", "image_column": "Parquet", "drop_unannotated": "COCO",
    "fields": "CSV or JSON Lines list, WebDataset or Parquet",
}

#: Options every kind accepts (``allow_empty``: a kind whose scan refuses empty classes then keeps them).
_EVERY_KIND_TAKES = frozenset({"allow_empty"})


class Source(ABC):
    """One kind of input, registered by name in :data:`packer.source.registry.SOURCES`.

    Subclasses set :attr:`kind` and :attr:`takes` (the :class:`SourceOptions` they use), say
    and scan and read it.
    """

    kind: ClassVar[str]
    #: The options of :class:`SourceOptions` this kind uses.
    takes: ClassVar[frozenset[str]] = frozenset()
    #: Whether its scan refuses a class without items unless ``allow_empty`` (a class folder
    #: without images, as ImageFolder does); a class a list or a table only names is kept, empty.
    refuses_empty_classes: ClassVar[bool] = False

    def __init__(self, location: str, options: SourceOptions) -> None:
        unused = [name for name in options.given() if name not in self.takes | _EVERY_KIND_TAKES]
        if unused:
            flags = ", ".join(_OPTION_FLAGS[name] for name in unused)
            kinds = " or ".join(dict.fromkeys(_OPTION_KINDS[name] for name in unused))
            raise SourceError(f"{flags} apply to a {kinds} source, but {location!r} is a {self.kind} "
                              "source: give that kind of source as SRC (or name its kind with "
                              "source_format=), or drop the option(s).")
        self.location = location
        self.options = options

    @abstractmethod
    def scan(self) -> SourceIndex:
        """Index the items without reading images.

        Raises:
            SourceError: the source cannot be used; the message names the file and the fix.
        """

    @abstractmethod
    def reader(self) -> ItemReader:
        """A picklable reader of this source's items (call after :meth:`scan`)."""

    def close(self) -> None:
        """Release what reading made on this machine (an archive's decompressed spool); the
        conversion calls it when done. Nothing by default."""

    def keep_scans_in(self, folder: str) -> None:
        """Where the scan may find what an earlier run over the same input kept (array tasks, a
        resume), and keep what it found (:meth:`save_scans`): a kind whose scan is costly does
        (an archive's index); the others ignore it. Call before :meth:`scan`."""

    def save_scans(self) -> None:
        """Keep what the scan found in the folder :meth:`keep_scans_in` named; the conversion
        calls it once DST is its own (a refused conversion leaves no folder behind)."""

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def inside(self) -> str:
        """The path DST must neither lie in nor hold (a tree's root, a list's root, an archive)."""
        return self.location

    def describe(self) -> str:
        """What the source is, for people (``an ImageFolder tree``, ``a tar of 1000 tars``)."""
        return f"a {self.kind} source"

    def item_words(self) -> str:
        """What this kind's items are called in a report (``images``; ``samples``, ``rows``)."""
        return "images"

    def not_packed(self, report: ScanReport) -> str | None:
        """What the scan saw and will not pack, in this kind's words, for the dry run (None:
        nothing beyond the report's notes). A tree's: files without an image name, at the root."""
        return (f"{report.other_files} file(s) without an image name, {report.root_files} file(s) at "
                "the root (outside any class)")

    def scan_filter(self) -> str:
        """How items were recognised, for the manifest's ``scan.filter``: the kind's name, or
        ``"extensions"`` / ``"is_valid_file"`` where image names were filtered so."""
        return self.kind

    def manifest_extra(self) -> dict[str, Any]:
        """Entries the manifest's ``extra`` gains for this kind (a list file's ``list``)."""
        return {}

    def params(self) -> dict[str, Any]:
        """What the manifest records of the source (``extra.source.params``)."""
        return {k: v for k, v in self.options.given().items() if k != "is_valid_file"}

