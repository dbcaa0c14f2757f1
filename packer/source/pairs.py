"""An image tree beside a second tree of per-image files (masks, label files), matched by stem:
where the two trees are (:class:`Pairing`), and walking them (:func:`walk`). Segmentation sets
(packer.source.masks) and YOLO sets (packer.source.yolo) are both laid out so.

SRC is the folder holding both trees (``VOC2012/``), or a folder inside the images' tree (a
split: ``cityscapes/leftImg8bit/train``): the other tree's same sub-folder is then walked.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

from packer.source.imagefolder import IMG_EXTENSIONS, walk_folder
from packer.source.statuses import EMPTY, MISSING_IMAGE, NOT_REGULAR, OK, PERMISSION_DENIED, TOO_LARGE

__all__ = ["Layout", "Pairing", "Walked", "find_layout", "images_by_stem", "paired_identity", "relative",
           "stat_file", "walk"]


@dataclass(frozen=True)
class Layout:
    """One way of laying out a set: the images' folder name and the other tree's, and how a
    file of the other tree names its image."""

    name: str
    images: str
    others: str
    #: What an image's stem ends with beyond the other file's (Cityscapes' ``_leftImg8bit``).
    image_suffix: str
    #: What the other tree's files end with, extension included: files that do not are not its.
    other_suffix: str
    #: Whether finding this layout is distinctive enough to detect it without source_format=.
    detected: bool


@dataclass(frozen=True)
class Pairing:
    """A layout found at SRC: ``base`` holds both folders, ``sub`` is the part of each walked."""

    layout: Layout
    base: str
    sub: tuple[str, ...]

    @property
    def image_folder(self) -> str:
        """The folder of the images walked (``base/<images>/<sub>``)."""
        return os.path.join(self.base, self.layout.images, *self.sub)

    @property
    def other_folder(self) -> str:
        """The folder of the other files walked (``base/<others>/<sub>``)."""
        return os.path.join(self.base, self.layout.others, *self.sub)

    def key(self, folder: str, relpath: str) -> str:
        """A sample's key: ``relpath`` under ``folder``'s walked part, as a path under ``base``."""
        return "/".join((folder, *self.sub, relpath))


def find_layout(location: str, layouts: tuple[Layout, ...]) -> Pairing | None:
    """The first of ``layouts`` that fits the folder ``location`` (see the module docstring)."""
    top = os.path.abspath(location)
    for layout in layouts:
        if all(os.path.isdir(os.path.join(top, name)) for name in (layout.images, layout.others)):
            return Pairing(layout, top, ())
    parts = top.split(os.sep)
    for layout in layouts:
        for at in range(len(parts) - 1, 0, -1):
            if parts[at] == layout.images:
                base = os.sep.join(parts[:at]) or os.sep
                pairing = Pairing(layout, base, tuple(parts[at + 1:]))
                if os.path.isdir(pairing.other_folder):
                    return pairing
    return None


@dataclass
class Walked:
    """What walking one folder found: file paths relative to it, in walk order, and the report's lists."""

    files: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    loops: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


def relative(path: str, folder: str) -> str:
    """``path`` under ``folder``, as a POSIX path."""
    return os.path.relpath(path, folder).replace(os.sep, "/")


def walk(folder: str, include_hidden: bool) -> Walked:
    """Every file under ``folder``, in ImageFolder's sorted walk order (hidden names left out
    unless ``include_hidden``; symlink loops cut)."""
    walked = Walked()
    for dirpath, names in walk_folder(folder, include_hidden=include_hidden, hidden=walked.hidden,
                                      loops=walked.loops, unreadable=walked.unreadable):
        walked.files += [relative(os.path.join(dirpath, name), folder) for name in names]
    return walked


def stat_file(path: str, max_bytes: int) -> tuple[int, int, int]:
    """``(status, size, mtime_ns)`` of the file at ``path`` (stat only; a file not there is
    ``MISSING_IMAGE``)."""
    try:
        info = os.stat(path)
    except PermissionError:
        return PERMISSION_DENIED, -1, -1
    except OSError:
        return MISSING_IMAGE, -1, -1
    if not os.path.isfile(path):
        return NOT_REGULAR, -1, -1
    status = EMPTY if info.st_size == 0 else TOO_LARGE if info.st_size > max_bytes else OK
    return status, min(info.st_size, max_bytes + 1), info.st_mtime_ns


def images_by_stem(layout: Layout, files: list[str]) -> tuple[dict[str, list[str]], int]:
    """Each image stem (the layout's image suffix cut) to its files, in walk order, and the
    count of other files."""
    by_stem: dict[str, list[str]] = {}
    other = 0
    for relpath in files:
        stem, extension = os.path.splitext(relpath)
        if extension.lower() not in IMG_EXTENSIONS or not stem.endswith(layout.image_suffix):
            other += 1
            continue
        by_stem.setdefault(stem[:len(stem) - len(layout.image_suffix)], []).append(relpath)
    return by_stem, other


def paired_identity(image_mtime: int, other: tuple[int, int, int]) -> int:
    """An item's ``mtime_ns`` slot: its image's mtime hashed with its other file's size and
    mtime (``stat_file``'s), signed int64, so that ``resume`` and ``update`` see a sample whose
    mask or label file alone changed as changed."""
    digest = hashlib.blake2b(b"%d|%d|%d" % (image_mtime, other[1], other[2]), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)
