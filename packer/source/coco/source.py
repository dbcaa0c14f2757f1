"""A COCO instances file and its image folder as a source: one sample per image, with its boxes.

``packer.convert("annotations/instances_val2017.json", dst, to="lmdb", root="val2017/")``. Each
entry of ``images`` is a sample with the fields (in this order)

============== ============ ================================================================
``image``      image        the file's bytes, stored by the conversion's codec
``boxes``      boxes        each annotation's ``bbox``, xywh pixels as float32 (the values as
                            given; a box past the image is clipped to it, one without area
                            skips its image as ``degenerate_box``: the boxes type's rules)
``box_labels`` box_labels   each annotation's category as a box class: categories in
                            ascending id order are classes 0 to K-1, named by their names
``iscrowd``    ndarray      uint8 ``[N]``, each annotation's ``iscrowd``
``area``       ndarray      float32 ``[N]``, each annotation's ``area`` (float32 nearest)
``image_id``   int          the image's id
``segmentation`` polygons   each annotation's polygons or RLE as given, one entry per box
============== ============ ================================================================

There is no class ``label`` (a COCO image has no one class): the dataset's ``classes`` are empty,
and the manifest's ``extra.coco.category_ids`` maps box label ``i`` back to its category id.

Images are in ascending id order, as torchvision's ``CocoDetection`` indexes them (so sample
``i`` is its item ``i``); an image's boxes are in the file's annotation order. A sample's key is
its ``file_name``, relative to the root: ``root=`` (``--root``), default the COCO file's folder.
When none of the images is there, the scan stops and says to give ``root=`` (naming COCO's
usual ``annotations/instances_X.json`` + ``X/`` layout's folder when it exists). An image without
annotations is kept, with zero boxes; with ``drop_unannotated=True`` (``--drop-unannotated``)
it is skipped as ``no_annotation`` instead, listed with the other skips (nothing of it is read).

Bad input: what :mod:`packer.source.coco.annotations` refuses, before anything is written; an image
whose file is not there is skipped as ``missing`` (an empty one ``empty_file``, one over
``max_bytes`` ``too_large``); a ``file_name`` that is absolute or has a ``..`` segment or a
control character is never opened: the image is skipped as ``missing_image``, under the key
``(unsafe file_name of image <id>)``, and a scan note names it. So packed + skipped = images.

An image's identity (what ``resume`` and ``update`` compare) is its file's size, and its file's
mtime hashed with its annotations (in the ``mtime_ns`` slot): an image whose boxes change in the
file is a changed input, though its image file is the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from typing import Any, ClassVar, Final

import numpy as np

from packer.digests import SHA256, DigestAlgorithm
from packer.errors import SourceError, SourceNotFoundError
from packer.keys import check_key, escaped, key_problem
from packer.source.base import ItemReader, ScanReport, Source, SourceIndex, SourceItem, SourceOptions
from packer.source.coco.annotations import CocoFile, looks_like_coco, parse_coco
from packer.source.imagecheck import image_dimensions
from packer.source.sourcefile import UnpackableFile, read_source
from packer.source.statuses import (
    EMPTY,
    MISSING,
    NO_ANNOTATION,
    NOT_REGULAR,
    OK,
    PERMISSION_DENIED,
    TOO_LARGE,
    UNSAFE_PATH,
    skip_reason,
)

__all__ = ["CocoReader", "CocoSource", "coco_schema", "looks_like_coco"]

#: The split a COCO file name names (``instances_val2017.json`` -> ``val2017``).
_SPLIT: Final = re.compile(r"(?:instances|person_keypoints|captions|image_info|panoptic)_(.+)\.json\Z")
#: Unsafe file names a scan note quotes.
_QUOTED: Final = 3


def coco_schema(names: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    """The fields of a COCO sample (the module docstring's table), ``names`` the box classes."""
    return (
        {"name": "image", "type": "image", "params": {}},
        {"name": "boxes", "type": "boxes", "params": {"image": "image", "format": "xywh"}},
        {"name": "box_labels", "type": "box_labels", "params": {"boxes": "boxes", "classes": list(names)}},
        {"name": "iscrowd", "type": "ndarray", "params": {"dtype": "uint8", "shape": [None]}},
        {"name": "area", "type": "ndarray", "params": {"dtype": "float32", "shape": [None]}},
        {"name": "image_id", "type": "int", "params": {}},
        {"name": "segmentation", "type": "polygons", "params": {"boxes": "boxes"}},
    )


def _unsafe_key(image_id: int) -> str:
    return f"(unsafe file_name of image {image_id})"


def _status(path: str, max_bytes: int) -> tuple[int, int, int]:
    """``(status, size, mtime_ns)`` of the image file at ``path`` (stat only, nothing read)."""
    try:
        info = os.stat(path)
    except PermissionError:
        return PERMISSION_DENIED, -1, -1
    except OSError:  # not there, a broken link, a file where a folder should be
        return MISSING, -1, -1
    if not stat.S_ISREG(info.st_mode):
        return NOT_REGULAR, -1, -1
    status = EMPTY if info.st_size == 0 else TOO_LARGE if info.st_size > max_bytes else OK
    return status, min(info.st_size, max_bytes + 1), info.st_mtime_ns


def _identity(mtime_ns: int, metadata: str) -> int:
    """The ``mtime_ns`` slot of an image's identity: its file's mtime and its annotations, hashed
    (signed int64), so that ``resume`` and ``update`` see an image whose boxes changed as changed."""
    digest = hashlib.blake2b(b"%d|%s" % (mtime_ns, metadata.encode("utf-8", "surrogatepass")), digest_size=8)
    return int.from_bytes(digest.digest(), "little", signed=True)


def _items(parsed: CocoFile, root: str, max_bytes: int,
           drop_unannotated: bool = False) -> tuple[list[SourceItem], list[str]]:
    """One item per image, in id order, and the unsafe file names (escaped, for a note); an image
    without annotations is a ``no_annotation`` skip (not even stat'ed) under ``drop_unannotated``.

    Raises:
        SourceError: two images name one file.
    """
    items: list[SourceItem] = []
    unsafe: list[str] = []
    seen: dict[str, int] = {}
    for image in parsed.images:
        problem = key_problem(image.file_name)
        if problem is not None:
            unsafe.append(f"image {image.image_id}: {escaped(repr(image.file_name))} {problem}")
            key, status, size, mtime = _unsafe_key(image.image_id), UNSAFE_PATH, 0, -1  # nothing to stat
        else:
            key = check_key(image.file_name, source=parsed.path, what="file_name")
            if drop_unannotated and not json.loads(image.metadata)["bbox"]:
                status, size, mtime = NO_ANNOTATION, 0, _identity(-1, image.metadata)
            else:
                status, size, mtime = _status(os.path.join(root, *key.split("/")), max_bytes)
                mtime = _identity(mtime, image.metadata)
        if key in seen:
            raise SourceError(f"Bad COCO file {parsed.path!r}: images {seen[key]} and {image.image_id} both "
                              f"name the file {key!r}: one entry per image file. Fix the file (nothing "
                              "was written).")
        seen[key] = image.image_id
        items.append(SourceItem(key, -1, size, mtime, (status,)))
    return items, unsafe


def _no_image_found(path: str, root: str, given: bool) -> SourceError:
    """The scan's refusal when not one image is under ``root``, with the folder to give."""
    fix = "give root= the folder that holds the images the file names"
    split = _SPLIT.match(os.path.basename(path))
    candidate = os.path.join(os.path.dirname(os.path.dirname(path)), split.group(1)) if split else None
    if candidate is not None and os.path.isdir(candidate) and candidate != root:
        fix += f" (COCO's layout puts them in {candidate!r}: root={candidate!r})"
    where = "root" if given else "the COCO file's folder (the default root)"
    return SourceError(f"None of the images the COCO file {path!r} names is under {where} {root!r}: "
                       f"{fix}. Nothing was written.")


class CocoReader(ItemReader):
    """Reads the image files under ``root``, and each image's fields from its item's metadata;
    pickles as the root alone (the annotations travel with each shard task's items)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def where(self, relpath: str) -> str:
        """The image file's path."""
        return os.path.join(self.root, *relpath.split("/"))

    def known_skip(self, item: SourceItem) -> str | None:
        """The skip the scan found: a missing, empty, too large or unsafe image file."""
        return skip_reason(item.locator[0])

    def read(self, item: SourceItem) -> bytes:
        """The image file's bytes; see :meth:`ItemReader.read`."""
        status = item.locator[0]
        reason = skip_reason(status)
        if reason is not None:
            raise UnpackableFile(reason, _DETAILS.get(status, reason).format(root=self.root))
        path = self.where(item.relpath)
        try:
            data = read_source(path)
        except FileNotFoundError:
            raise UnpackableFile("missing", _DETAILS[MISSING].format(root=self.root)) from None
        except OSError as err:
            raise SourceError(f"Reading {path!r} failed: {err}. Fix the storage, then run the same "
                              "conversion again with resume=True.") from err
        if len(data) != item.size:
            raise SourceError(f"Image file {path!r} changed during the conversion ({item.size} bytes when "
                              f"scanned, {len(data)} now): convert again with overwrite=True.")
        return data

    def values(self, item: SourceItem, data: bytes, metadata: str) -> dict[str, Any]:
        """The sample's fields: the image's bytes and its annotations (the item's metadata)."""
        found = json.loads(metadata)
        try:
            area = np.asarray(found["area"], dtype=np.float64).astype(np.float32)
        except (TypeError, ValueError) as err:
            raise UnpackableFile("invalid_value", f"an annotation's area is not a number: {err}") from None
        return {"image": data, "boxes": found["bbox"], "box_labels": found["category"],
                "iscrowd": found["iscrowd"], "area": area, "image_id": found["image_id"],
                "segmentation": found["segmentation"]}

    def dimensions(self, item: SourceItem) -> tuple[int, int] | None:
        """From the file's header alone; None for an image the scan skips."""
        return image_dimensions(self.where(item.relpath)) if item.locator[0] == OK else None

    def digest(self, item: SourceItem, algorithm: DigestAlgorithm = SHA256) -> str:
        """The image file's digest by ``algorithm`` (hex), streamed; ``""`` when it cannot be read."""
        if item.locator[0] != OK:
            return ""
        try:
            return algorithm.file(self.where(item.relpath))
        except OSError:
            return ""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CocoReader) and self.root == other.root

    def __hash__(self) -> int:
        return hash(("coco", self.root))


_DETAILS: Final = {
    MISSING: "the COCO file names it, but there is no such file under {root!r}",
    EMPTY: "the image file is empty (0 bytes)",
    TOO_LARGE: "the image file is larger than max_bytes",
    NOT_REGULAR: "not a regular file (a folder, FIFO, socket or device)",
    PERMISSION_DENIED: "the image file cannot be opened for reading (permission denied)",
    NO_ANNOTATION: "the COCO file lists no annotation of this image (dropped by drop_unannotated=True)",
    UNSAFE_PATH: "the image's file_name is absolute or has a '..' segment or a control character: packer "
                 "opens no path that could lead outside the root {root!r} (the scan's notes name it)",
}


class CocoSource(Source):
    """A COCO instances file (JSON) and the folder of its images; see the module docstring."""

    kind: ClassVar[str] = "coco"
    takes: ClassVar[frozenset[str]] = frozenset({"root", "drop_unannotated"})
    #: For detection (:func:`packer.source.registry.detect_kind`): a peek, nothing parsed.
    looks_like_coco = staticmethod(looks_like_coco)

    def __init__(self, location: str, options: SourceOptions) -> None:
        super().__init__(location, options)
        if not os.path.isfile(location):
            raise SourceNotFoundError(f"COCO file {location!r} does not exist or is not a file.")
        self.root = os.path.abspath(options.root) if options.root is not None else os.path.dirname(location)
        if not os.path.isdir(self.root):
            raise SourceNotFoundError(f"The root {self.root!r} of the COCO file {location!r} is not a "
                                      "folder: give root= the folder that holds its images.")
        self._scanned: tuple[SourceIndex, CocoFile] | None = None

    def _scan(self) -> tuple[SourceIndex, CocoFile]:
        if self._scanned is None:
            parsed = parse_coco(self.location)
            drop = self.options.drop_unannotated
            items, unsafe = _items(parsed, self.root, self.options.max_bytes, drop)
            looked = [item.locator[0] for item in items
                      if item.locator[0] not in (UNSAFE_PATH, NO_ANNOTATION)]
            if looked and all(status == MISSING for status in looked):
                raise _no_image_found(self.location, self.root, self.options.root is not None)
            notes = list(parsed.notes)
            if parsed.empty_images:
                notes.append(f"{parsed.empty_images} image(s) have no annotation: " + (
                    "skipped as no_annotation (drop_unannotated=True)." if drop
                    else "kept, with zero boxes (drop_unannotated=True skips them)."))
            if unsafe:
                quoted = "; ".join(unsafe[:_QUOTED]) + ("; ..." if len(unsafe) > _QUOTED else ".")
                notes.append(f"{len(unsafe)} image(s) have an unsafe file_name, never opened (skipped as "
                             f"missing_image): {quoted}")
            index = SourceIndex(self.root, (), tuple(items), ScanReport(notes=tuple(notes)),
                                metadata=tuple(image.metadata for image in parsed.images),
                                schema=coco_schema(parsed.category_names))
            self._scanned = (index, parsed)
        return self._scanned

    def scan(self) -> SourceIndex:
        """Parse the file once and stat each image (nothing else is read)."""
        return self._scan()[0]

    def reader(self) -> CocoReader:
        """Reads the image files under the root."""
        return CocoReader(self.root)

    def describe(self) -> str:
        """A COCO file."""
        return "a COCO instances file"

    def not_packed(self, report: ScanReport) -> str | None:
        """Nothing beyond the notes (annotations dropped, unsafe names)."""
        return None

    def inside(self) -> str:
        """The image folder (DST may neither lie in it nor hold it)."""
        return self.root

    def manifest_extra(self) -> dict[str, Any]:
        """``extra.coco``: the file, the root, and box label ``i``'s category id."""
        parsed = self._scan()[1]
        return {"coco": {"file": parsed.path, "root": self.root, "category_ids": list(parsed.category_ids),
                         "images": len(parsed.images), "annotations": parsed.annotations,
                         "dropped_annotations": parsed.dropped}}
