"""Layer 2, the input: every kind of source behind one protocol (:mod:`packer.source.base`),
chosen by :mod:`packer.source.registry`; reading one item; checking that it is an image.

Nothing here knows about shards or torch. Names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packer.lazy import lazy_exports

if TYPE_CHECKING:
    from packer.source.base import ItemReader, ScanReport, Source, SourceIndex, SourceItem, SourceOptions
    from packer.source.imagecheck import (
        CHECK_LEVELS,
        DEFAULT_MAX_PIXELS,
        UndecodableImage,
        check_image,
        decoder_failures,
        image_dimensions,
    )
    from packer.source.imagefolder import (
        IMG_EXTENSIONS,
        FolderIndex,
        find_classes,
        scan_imagefolder,
    )
    from packer.source.registry import SOURCES, detect_kind, expand_pattern, open_source
    from packer.source.sourcefile import SKIP_REASONS, UnpackableFile, read_source

__all__ = ["CHECK_LEVELS", "DEFAULT_MAX_PIXELS", "IMG_EXTENSIONS", "SKIP_REASONS", "SOURCES", "FolderIndex",
           "ItemReader", "ScanReport", "Source", "SourceIndex", "SourceItem", "SourceOptions",
           "UndecodableImage", "UnpackableFile", "check_image", "decoder_failures", "detect_kind",
           "expand_pattern", "find_classes", "image_dimensions", "open_source", "read_source",
           "scan_imagefolder"]
__getattr__, __dir__ = lazy_exports(__name__, {
    ".base": ["ItemReader", "ScanReport", "Source", "SourceIndex", "SourceItem", "SourceOptions"],
    ".registry": ["SOURCES", "detect_kind", "expand_pattern", "open_source"],
    ".imagefolder": ["FolderIndex", "IMG_EXTENSIONS", "find_classes", "scan_imagefolder"],
    ".sourcefile": ["SKIP_REASONS", "UnpackableFile", "read_source"],
    ".imagecheck": [
        "CHECK_LEVELS", "DEFAULT_MAX_PIXELS", "UndecodableImage", "check_image", "decoder_failures",
        "image_dimensions",
    ],
}, __all__)
