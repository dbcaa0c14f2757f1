"""A YOLO set (Ultralytics' ``images/<split>/`` beside ``labels/<split>/*.txt``) as a source.

``packer.convert("datasets/coco8/images/train", dst, to="lmdb", source_format="yolo")``: each
image is a sample with the fields

============== ============ ============================================================
``image``      image        the image file's bytes, stored by the conversion's codec
``boxes``      boxes        each label line's box, cxcywh normalised to [0, 1] (float32),
                            as written; one past the image is clipped to it, one without
                            area skips the image as ``degenerate_box``
``box_labels`` box_labels   each line's class, named by the data.yaml's ``names``
``segments``   polygons     a segment line's polygon (flat, normalised), ``[]`` for a box
============== ============ ============================================================

SRC is a split of the images' tree (``images/train``: its labels are ``labels/train``), or the
folder holding ``images/`` and ``labels/`` (every split). The class names are ``classes_file=``'s,
else the ``names`` of the YAML file beside ``images/`` (``data.yaml``; PyYAML, the ``yolo``
extra); without either, box labels are unnamed numbers (a scan note says so). Images are in
ImageFolder's sorted walk order, keyed by their path under that folder (``images/train/a.jpg``).

An image without a label file is a background image: kept, with no boxes (Ultralytics' own
reading); the scan notes how many. A label file without its image is counted as another
file. A label line that is neither a box nor a segment skips its image (``invalid_value``,
the line named), a class past the names as ``missing_label``, an unreadable or empty image
with its reason: packed + skipped = images. A sample's identity hashes its label file's size and mtime
with its image's, so editing labels alone is a change ``update`` sees.
"""

from __future__ import annotations

import json
import os
from typing import Any, ClassVar, Final

from packer.digests import SHA256, DigestAlgorithm
from packer.errors import EmptySourceError, SourceError, SourceNotFoundError
from packer.source.base import ItemReader, ScanReport, Source, SourceIndex, SourceItem, SourceOptions
from packer.source.imagecheck import image_dimensions
from packer.source.imagefolder import IMG_EXTENSIONS
from packer.source.pairs import Layout, Pairing, find_layout, paired_identity, relative, stat_file, walk
from packer.source.sourcefile import UnpackableFile, read_source
from packer.source.statuses import EMPTY, NOT_REGULAR, OK, PERMISSION_DENIED, TOO_LARGE, skip_reason
from packer.source.yolo.labels import parse_labels
from packer.source.yolo.names import class_names, yaml_files

__all__ = ["YoloReader", "YoloSource", "looks_like_yolo", "yolo_schema"]

LAYOUT: Final = Layout("yolo", "images", "labels", "", ".txt", detected=True)
#: Names a scan note quotes.
_QUOTED: Final = 3


def yolo_schema(names: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    """The fields of a YOLO sample (the module docstring's table), ``names`` the box classes."""
    return (
        {"name": "image", "type": "image", "params": {}},
        {"name": "boxes", "type": "boxes",
         "params": {"image": "image", "format": "cxcywh", "normalized": True}},
        {"name": "box_labels", "type": "box_labels", "params": {"boxes": "boxes", "classes": list(names)}},
        {"name": "segments", "type": "polygons", "params": {"boxes": "boxes", "normalized": True}},
    )


def looks_like_yolo(location: str) -> bool:
    """Whether the folder ``location`` is a YOLO set: ``images/`` beside ``labels/`` and a YAML
    file beside both (the folder names alone say too little)."""
    pairing = find_layout(location, (LAYOUT,))
    return pairing is not None and bool(yaml_files(pairing.base))


class YoloReader(ItemReader):
    """Reads an item's image and its label file under ``base``; pickles as the folder and the
    byte limit."""

    def __init__(self, base: str, max_bytes: int) -> None:
        self.base = base
        self.max_bytes = max_bytes

    def where(self, relpath: str) -> str:
        """The file's path."""
        return os.path.join(self.base, *relpath.split("/"))

    def known_skip(self, item: SourceItem) -> str | None:
        """The skip the scan found: an empty, too large or unreadable image."""
        return skip_reason(item.locator[0])

    def _read(self, relpath: str) -> bytes:
        path = self.where(relpath)
        try:
            return read_source(path)
        except FileNotFoundError as err:
            raise SourceError(f"Source file {path!r} vanished during the conversion: restore it, then run "
                              "the same conversion again with resume=True.") from err
        except OSError as err:
            raise SourceError(f"Reading {path!r} failed: {err}. Fix the storage, then run the same "
                              "conversion again with resume=True.") from err

    def read(self, item: SourceItem) -> bytes:
        """The image file's bytes; see :meth:`ItemReader.read`."""
        reason = skip_reason(item.locator[0])
        if reason is not None:
            raise UnpackableFile(reason, _DETAILS.get(item.locator[0], reason))
        data = self._read(item.relpath)
        if len(data) != item.size:
            raise SourceError(f"Image file {self.where(item.relpath)!r} changed during the conversion "
                              f"({item.size} bytes when scanned, {len(data)} now): convert again with "
                              "overwrite=True.")
        return data

    def values(self, item: SourceItem, data: bytes, metadata: str) -> dict[str, Any]:
        """The image's bytes and its label file's boxes, classes and segments."""
        labels_key = json.loads(metadata)["labels"]
        if labels_key is None:  # a background image
            return {"image": data, "boxes": [], "box_labels": [], "segments": []}
        if os.path.getsize(self.where(labels_key)) > self.max_bytes:
            raise UnpackableFile("too_large", f"its label file {labels_key!r} is larger than max_bytes")
        labels = parse_labels(self._read(labels_key), labels_key)
        return {"image": data, "boxes": labels.box_array(), "box_labels": labels.classes,
                "segments": labels.segments}

    def dimensions(self, item: SourceItem) -> tuple[int, int] | None:
        """From the image file's header alone; None for an item the scan skips."""
        return image_dimensions(self.where(item.relpath)) if item.locator[0] == OK else None

    def digest(self, item: SourceItem, algorithm: DigestAlgorithm = SHA256) -> str:
        """The image file's digest by ``algorithm`` (hex), streamed; ``""`` when it cannot be read."""
        try:
            return algorithm.file(self.where(item.relpath)) if item.locator[0] == OK else ""
        except OSError:
            return ""

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, YoloReader)
                and (self.base, self.max_bytes) == (other.base, other.max_bytes))

    def __hash__(self) -> int:
        return hash(("yolo", self.base, self.max_bytes))


_DETAILS: Final = {
    EMPTY: "the image file is empty (0 bytes)",
    TOO_LARGE: "the image file is larger than max_bytes",
    NOT_REGULAR: "the image is not a regular file (a folder, FIFO, socket or device)",
    PERMISSION_DENIED: "the image file cannot be opened for reading (permission denied)",
}


def _quoted(count: int, names: list[str]) -> str:
    return ", ".join(names[:_QUOTED]) + (", ..." if count > _QUOTED else "")


class YoloSource(Source):
    """Images and their YOLO label files; see the module docstring."""

    kind: ClassVar[str] = "yolo"
    takes: ClassVar[frozenset[str]] = frozenset({"include_hidden", "classes_file"})
    #: For detection (:func:`packer.source.registry.detect_kind`): a few stats, nothing walked.
    looks_like_yolo = staticmethod(looks_like_yolo)

    def __init__(self, location: str, options: SourceOptions) -> None:
        super().__init__(location, options)
        pairing = find_layout(location, (LAYOUT,)) if os.path.isdir(location) else None
        if pairing is None:
            raise SourceNotFoundError(f"Found no images/ folder beside a labels/ folder at {location!r}: "
                                      "give a YOLO set's images/<split> folder, or the folder holding "
                                      "images/ and labels/.")
        self.pairing: Pairing = pairing
        self._scanned: tuple[SourceIndex, dict[str, Any]] | None = None

    def _items(self, images: list[str], labels: set[str]) -> tuple[list[SourceItem], list[str], list[str]]:
        """One item per image in walk order, its metadata, and the images without a label file
        (``a.jpg`` and ``a.png`` both take ``a.txt``'s labels)."""
        items, metadata, background = [], [], []
        for path in images:
            stem, extension = os.path.splitext(path)
            if extension.lower() not in IMG_EXTENSIONS:
                continue
            key = self.pairing.key(LAYOUT.images, path)
            status, size, mtime = stat_file(os.path.join(self.pairing.image_folder, *path.split("/")),
                                            self.options.max_bytes)
            label = stem + LAYOUT.other_suffix
            other, labels_key = (OK, -1, -1), None
            if label in labels:
                where = os.path.join(self.pairing.other_folder, *label.split("/"))
                other = stat_file(where, self.options.max_bytes)
                labels_key = self.pairing.key(LAYOUT.others, label)
            else:
                background.append(key)
            items.append(SourceItem(key, -1, size, paired_identity(mtime, other), (status,)))
            metadata.append(json.dumps({"labels": labels_key}))
        return items, metadata, background

    def _scan(self) -> tuple[SourceIndex, dict[str, Any]]:
        if self._scanned is not None:
            return self._scanned
        names, names_from = class_names(self.pairing.base, self.options.classes_file)
        hidden = self.options.include_hidden
        images, labels = walk(self.pairing.image_folder, hidden), walk(self.pairing.other_folder, hidden)
        label_files = {p for p in labels.files if p.endswith(LAYOUT.other_suffix)}
        items, metadata, background = self._items(images.files, label_files)
        if not items:
            raise EmptySourceError(f"Found no image in {self.pairing.image_folder!r}: give a YOLO set's "
                                   "images/<split> folder.")
        image_stems = {os.path.splitext(p)[0] for p in images.files
                       if os.path.splitext(p)[1].lower() in IMG_EXTENSIONS}
        orphans = [self.pairing.key(LAYOUT.others, p) for p in sorted(label_files)
                   if p[:-len(LAYOUT.other_suffix)] not in image_stems]
        notes = []
        if background:
            notes.append(f"{len(background)} image(s) have no label file, so no boxes (background "
                         f"images): {_quoted(len(background), background)}")
        if orphans:
            notes.append(f"{len(orphans)} label file(s) have no image, so are not packed: "
                         f"{_quoted(len(orphans), orphans)}")
        if names_from is None:
            notes.append(f"no classes_file= and no YAML file with names in {self.pairing.base!r}: the "
                         "box labels are unnamed")
        base = self.pairing.base
        report = ScanReport(
            ignored_hidden=tuple(relative(p, base) for p in images.hidden + labels.hidden),
            cut_symlink_loops=tuple(relative(p, base) for p in images.loops + labels.loops),
            unreadable_dirs=tuple(relative(p, base) for p in images.unreadable + labels.unreadable),
            other_files=len(images.files) - len(items) + len(labels.files) - len(label_files) + len(orphans),
            notes=tuple(notes))
        index = SourceIndex(base, (), tuple(items), report, hidden, metadata=tuple(metadata),
                            schema=yolo_schema(names))
        extra = {"images": self.pairing.image_folder, "labels": self.pairing.other_folder,
                 "names_from": names_from, "background_images": len(background),
                 "orphan_labels": len(orphans)}
        self._scanned = (index, extra)
        return self._scanned

    def scan(self) -> SourceIndex:
        """Read the class names, walk both trees and stat each image (no label file is read)."""
        return self._scan()[0]

    def reader(self) -> YoloReader:
        """Reads the images and label files under the folder holding both trees."""
        return YoloReader(self.pairing.base, self.options.max_bytes)

    def describe(self) -> str:
        """A YOLO set."""
        return "a YOLO set"

    def not_packed(self, report: ScanReport) -> str | None:
        """Files that are neither an image nor a label file of an image."""
        return f"{report.other_files} file(s) that are neither an image nor the label file of one"

    def inside(self) -> str:
        """The folder holding both trees (DST may neither lie in it nor hold it)."""
        return self.pairing.base

    def manifest_extra(self) -> dict[str, Any]:
        """``extra.yolo``: both folders, where the names came from, the counts of the notes."""
        return {"yolo": self._scan()[1]}
