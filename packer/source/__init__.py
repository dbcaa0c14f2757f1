"""Layer 1, the input: scan an ImageFolder tree, read one source file, check that it is an image.

Nothing here knows about shards or torch. Names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packer.lazy import lazy_exports

if TYPE_CHECKING:
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
        ScanReport,
        SourceItem,
        find_classes,
        scan_imagefolder,
    )
    from packer.source.sourcefile import SKIP_REASONS, UnpackableFile, read_source

__all__ = ["CHECK_LEVELS", "DEFAULT_MAX_PIXELS", "FolderIndex", "IMG_EXTENSIONS", "SKIP_REASONS",
           "ScanReport", "SourceItem", "UndecodableImage", "UnpackableFile", "check_image",
           "decoder_failures", "find_classes", "image_dimensions", "read_source", "scan_imagefolder"]
__getattr__, __dir__ = lazy_exports(__name__, {
    ".imagefolder": [
        "FolderIndex", "IMG_EXTENSIONS", "ScanReport", "SourceItem", "find_classes",
        "scan_imagefolder",
    ],
    ".sourcefile": ["SKIP_REASONS", "UnpackableFile", "read_source"],
    ".imagecheck": [
        "CHECK_LEVELS", "DEFAULT_MAX_PIXELS", "UndecodableImage", "check_image", "decoder_failures",
        "image_dimensions",
    ],
}, __all__)
