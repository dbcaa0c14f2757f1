"""Layer 2, the input: every kind of source behind one protocol (:mod:`packer.source.base`),
chosen by :mod:`packer.source.registry`; reading one item; checking that it is an image.

Nothing here knows about shards or torch. Names are imported on first use; this namespace
exports only the public names homed here (the same objects as ``packer.<name>``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packer.lazy import lazy_exports

if TYPE_CHECKING:
    from packer.source.base import ItemReader, ScanReport, Source, SourceIndex, SourceItem, SourceOptions
    from packer.source.imagefolder import IMG_EXTENSIONS, find_classes, scan_imagefolder
    from packer.source.registry import open_source, register_source, source_names

__all__ = ["IMG_EXTENSIONS", "ItemReader", "ScanReport", "Source", "SourceIndex", "SourceItem",
           "SourceOptions", "find_classes", "open_source", "register_source", "scan_imagefolder",
           "source_names"]
_INTERNAL = "it is internal (its module may change in any release)"
__getattr__, __dir__ = lazy_exports(__name__, {
    ".base": ["ItemReader", "ScanReport", "Source", "SourceIndex", "SourceItem", "SourceOptions"],
    ".registry": ["open_source", "register_source", "source_names"],
    ".imagefolder": ["IMG_EXTENSIONS", "find_classes", "scan_imagefolder"],
}, __all__, deprecated={
    "FolderIndex": (".imagefolder", "it is packer.SourceIndex"),
    "SOURCES": (".registry", "use packer.source_names() and packer.register_source()"),
    "UnpackableFile": (".sourcefile", "an item reader's internal signal; " + _INTERNAL),
    **{name: (".imagecheck", _INTERNAL) for name in (
        "CHECK_LEVELS", "DEFAULT_MAX_PIXELS", "UndecodableImage", "check_image", "decoder_failures",
        "image_dimensions")},
    **{name: (".registry", _INTERNAL) for name in ("detect_kind", "expand_pattern")},
    **{name: (".sourcefile", _INTERNAL) for name in ("SKIP_REASONS", "read_source")},
})
