"""A segmentation set (an image tree and a mask tree matched by stem) as a source.

``packer.convert("VOCdevkit/VOC2012", dst, to="lmdb", classes_file="voc_classes.txt")``: each
mask file is a sample with the fields

============ ====== ==================================================================
``image``    image  the image file's bytes, stored by the conversion's codec
``mask``     mask   the mask's class index per pixel (a palette PNG's indices, a grey
                    PNG's values), stored losslessly as PNG; the same size as the image
============ ====== ==================================================================

The layouts (where the images and masks are, how a mask names its image) are
:mod:`packer.source.masks.layouts`'. Samples are in the order of the mask tree walked sorted
(ImageFolder's order); a sample's key is its image's path under the folder holding both trees
(``JPEGImages/2007_000032.jpg``). The scan's per-item metadata names its mask
(``{"mask": "SegmentationClass/2007_000032.png"}``) for the shard task that reads it; the
manifest does not keep it (the mask itself is in the sample's record).

``classes_file=`` (one name per line, line ``i`` naming pixel value ``i``) names the mask's
classes: a mask with a value that is neither a class nor the ignore value (255; VOC's boundary)
is skipped as ``mask_value``. Without it, any value is kept and the classes are not named.

Bad input: a mask without its image is skipped as ``missing_image`` (under the mask's own path);
a mask of another size than its image as ``mask_size``; an RGB (colour-coded) mask as
``invalid_value``; an image file that is empty, too large or unreadable with its usual reason.
Two images for one mask (``a.jpg`` and ``a.png``) are one error before anything is written.
Images without a mask are not samples (VOC's JPEGImages holds the detection images too): their
count is a scan note and in the manifest's ``extra.masks``. So packed + skipped = masks.

An item's identity (what ``resume`` and ``update`` compare) is its image file's size, and its
image's mtime hashed with its mask's size and mtime: a sample whose mask alone changed is a
changed input.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from packer.digests import SHA256, DigestAlgorithm
from packer.errors import EmptySourceError, SourceError
from packer.source.base import ItemReader, ScanReport, Source, SourceIndex, SourceItem, SourceOptions
from packer.source.classnames import read_class_names
from packer.source.imagecheck import image_dimensions
from packer.source.masks.layouts import find_pairing, looks_like_mask_tree
from packer.source.pairs import Pairing, Walked, images_by_stem, paired_identity, relative, stat_file, walk
from packer.source.sourcefile import UnpackableFile, read_source
from packer.source.statuses import (
    EMPTY,
    MISSING_IMAGE,
    NOT_REGULAR,
    OK,
    PERMISSION_DENIED,
    TOO_LARGE,
    skip_reason,
)

__all__ = ["MaskPairsReader", "MaskPairsSource", "mask_schema"]

#: Images without a mask a scan note names.
_QUOTED: Final = 3


def mask_schema(classes: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    """The fields of a mask sample: the image and its mask (``classes`` the pixel values' names)."""
    dtype = "uint8" if len(classes) <= 255 else "uint16"
    mask = {"image": "image", "dtype": dtype, "classes": list(classes)}
    return ({"name": "image", "type": "image", "params": {}},
            {"name": "mask", "type": "mask", "params": mask})


@dataclass
class _Scan:
    items: list[SourceItem]
    metadata: list[str]
    other_files: int
    without_mask: list[str]


def _pairs(pairing: Pairing, images: Walked, masks: Walked, max_bytes: int) -> _Scan:
    """One item per mask, in walk order, with its image.

    Raises:
        SourceError: two images share a mask's stem.
    """
    layout, under = pairing.layout, pairing.key
    by_stem, other = images_by_stem(layout, images.files)
    scan = _Scan([], [], other, [])
    used: set[str] = set()
    for relpath in masks.files:
        if not relpath.endswith(layout.other_suffix):
            scan.other_files += 1
            continue
        stem = relpath[:len(relpath) - len(layout.other_suffix)]
        mask_key = under(layout.others, relpath)
        mask = stat_file(os.path.join(pairing.other_folder, *relpath.split("/")), max_bytes)
        found = by_stem.get(stem, [])
        if len(found) > 1:
            raise SourceError(f"The mask {mask_key!r} has {len(found)} images in {pairing.image_folder!r} "
                              f"({', '.join(found)}): keep one image per mask (nothing was written).")
        if not found:
            scan.items.append(SourceItem(mask_key, -1, mask[1], mask[2], (MISSING_IMAGE,)))
        else:
            used.add(stem)
            image = os.path.join(pairing.image_folder, *found[0].split("/"))
            status, size, mtime = stat_file(image, max_bytes)
            identity = paired_identity(mtime, mask)
            scan.items.append(SourceItem(under(layout.images, found[0]), -1, size, identity, (status,)))
        scan.metadata.append(json.dumps({"mask": mask_key}))
    scan.without_mask = [under(layout.images, paths[0]) for stem, paths in by_stem.items()
                         if stem not in used]
    return scan


class MaskPairsReader(ItemReader):
    """Reads an item's image and, for its fields, its mask, both under ``base`` (the folder
    holding both trees); pickles as the folder and the byte limit."""

    def __init__(self, base: str, max_bytes: int) -> None:
        self.base = base
        self.max_bytes = max_bytes

    def where(self, relpath: str) -> str:
        """The file's path."""
        return os.path.join(self.base, *relpath.split("/"))

    def known_skip(self, item: SourceItem) -> str | None:
        """The skip the scan found: a mask without its image, an empty or too large image."""
        return skip_reason(item.locator[0])

    def _file(self, relpath: str, size: int | None) -> bytes:
        path = self.where(relpath)
        try:
            data = read_source(path)
        except FileNotFoundError as err:
            raise SourceError(f"Source file {path!r} vanished during the conversion: restore it, then run "
                              "the same conversion again with resume=True.") from err
        except OSError as err:
            raise SourceError(f"Reading {path!r} failed: {err}. Fix the storage, then run the same "
                              "conversion again with resume=True.") from err
        if size is not None and len(data) != size:
            raise SourceError(f"Source file {path!r} changed during the conversion ({size} bytes when "
                              f"scanned, {len(data)} now): convert again with overwrite=True.")
        return data

    def read(self, item: SourceItem) -> bytes:
        """The image file's bytes; see :meth:`ItemReader.read`."""
        reason = skip_reason(item.locator[0])
        if reason is not None:
            raise UnpackableFile(reason, _DETAILS.get(item.locator[0], reason))
        return self._file(item.relpath, item.size)

    def values(self, item: SourceItem, data: bytes, metadata: str) -> dict[str, Any]:
        """The image's bytes and its mask file's (the mask type checks its size and values)."""
        mask = json.loads(metadata)["mask"]
        try:
            size = os.stat(self.where(mask)).st_size
        except OSError:
            size = 0  # _file says what is wrong
        if size > self.max_bytes:
            raise UnpackableFile("too_large", f"its mask {mask!r} is larger than max_bytes")
        return {"image": data, "mask": self._file(mask, None)}

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
        return (isinstance(other, MaskPairsReader)
                and (self.base, self.max_bytes) == (other.base, other.max_bytes))

    def __hash__(self) -> int:
        return hash(("masks", self.base, self.max_bytes))


_DETAILS: Final = {
    MISSING_IMAGE: "a mask without its image (no image file of its stem beside it)",
    EMPTY: "the image file is empty (0 bytes)",
    TOO_LARGE: "the image file is larger than max_bytes",
    NOT_REGULAR: "the image is not a regular file (a folder, FIFO, socket or device)",
    PERMISSION_DENIED: "the image file cannot be opened for reading (permission denied)",
}


class MaskPairsSource(Source):
    """An image tree and a mask tree matched by stem; see the module docstring."""

    kind: ClassVar[str] = "masks"
    takes: ClassVar[frozenset[str]] = frozenset({"include_hidden", "classes_file"})
    #: For detection (:func:`packer.source.registry.detect_kind`): a few stats, nothing walked.
    looks_like_mask_tree = staticmethod(looks_like_mask_tree)

    def __init__(self, location: str, options: SourceOptions) -> None:
        super().__init__(location, options)
        self.pairing = find_pairing(location)
        self._scanned: tuple[SourceIndex, int] | None = None

    def _scan(self) -> tuple[SourceIndex, int]:
        if self._scanned is not None:
            return self._scanned
        classes = read_class_names(self.options.classes_file) if self.options.classes_file else ()
        include_hidden = self.options.include_hidden
        images = walk(self.pairing.image_folder, include_hidden)
        masks = walk(self.pairing.other_folder, include_hidden)
        scan = _pairs(self.pairing, images, masks, self.options.max_bytes)
        if not scan.items:  # allow_empty or not: a dataset holds at least one sample
            raise EmptySourceError(f"Found no mask (a file ending {self.pairing.layout.other_suffix!r}) in "
                                   f"{self.pairing.other_folder!r}: add the masks, or give the folder of "
                                   "a segmentation set that has them.")
        notes = []
        if scan.without_mask:
            more = ", ..." if len(scan.without_mask) > _QUOTED else ""
            notes.append(f"{len(scan.without_mask)} image(s) have no mask, so are no sample: "
                         f"{', '.join(scan.without_mask[:_QUOTED])}{more}")
        base = self.pairing.base
        report = ScanReport(
            ignored_hidden=tuple(relative(p, base) for p in images.hidden + masks.hidden),
            cut_symlink_loops=tuple(relative(p, base) for p in images.loops + masks.loops),
            unreadable_dirs=tuple(relative(p, base) for p in images.unreadable + masks.unreadable),
            other_files=scan.other_files, notes=tuple(notes))
        index = SourceIndex(self.pairing.base, (), tuple(scan.items), report, include_hidden,
                            metadata=tuple(scan.metadata), schema=mask_schema(classes))
        self._scanned = (index, len(scan.without_mask))
        return self._scanned

    def scan(self) -> SourceIndex:
        """Walk both trees and stat each pair (nothing is read)."""
        return self._scan()[0]

    def reader(self) -> MaskPairsReader:
        """Reads the images and masks under the folder holding both trees."""
        return MaskPairsReader(self.pairing.base, self.options.max_bytes)

    def describe(self) -> str:
        """A segmentation set, with its layout."""
        return f"a segmentation set ({self.pairing.layout.name} layout)"

    def item_words(self) -> str:
        """Each item is a mask and its image."""
        return "masks"

    def not_packed(self, report: ScanReport) -> str | None:
        """Files that are neither an image nor a mask of the layout."""
        return f"{report.other_files} file(s) that are neither an image nor a mask of the layout"

    def inside(self) -> str:
        """The folder holding both trees (DST may neither lie in it nor hold it)."""
        return self.pairing.base

    def manifest_extra(self) -> dict[str, Any]:
        """``extra.masks``: the layout, both folders, and the images left out for having no mask."""
        without = self._scan()[1]
        return {"masks": {"layout": self.pairing.layout.name, "images": self.pairing.image_folder,
                          "masks": self.pairing.other_folder, "images_without_mask": without}}
