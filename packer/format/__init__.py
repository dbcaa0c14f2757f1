"""Layer 2, the on-disk format: manifest, sample index, shard set, codecs and storage backends.

What a packed dataset is on disk, and how its bytes are written and read, without torch.
Names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packer.lazy import lazy_exports

if TYPE_CHECKING:
    from packer.format.backends import (
        Backend,
        ShardReader,
        ShardWriter,
        backend_names,
        get_backend,
        register_backend,
    )
    from packer.format.codecs import Codec, codec_class, codec_names, get_codec, register_codec
    from packer.format.manifest import (
        FORMAT_VERSION,
        IN_PROGRESS_NAME,
        MANIFEST_NAME,
        FileEntry,
        Manifest,
        ScanInfo,
        ShardEntry,
        SkippedFile,
    )
    from packer.format.sample_index import INDEX_FILES, SampleIndex
    from packer.format.shardset import ShardSet

__all__ = ["Backend", "Codec", "FORMAT_VERSION", "FileEntry", "INDEX_FILES", "IN_PROGRESS_NAME",
           "MANIFEST_NAME", "Manifest", "SampleIndex", "ScanInfo", "ShardEntry", "ShardReader",
           "ShardSet", "ShardWriter", "SkippedFile", "backend_names", "codec_class", "codec_names",
           "get_backend", "get_codec", "register_backend", "register_codec"]
__getattr__, __dir__ = lazy_exports(__name__, {
    ".manifest": [
        "FORMAT_VERSION", "FileEntry", "IN_PROGRESS_NAME", "MANIFEST_NAME", "Manifest", "ScanInfo",
        "ShardEntry", "SkippedFile",
    ],
    ".sample_index": ["INDEX_FILES", "SampleIndex"],
    ".shardset": ["ShardSet"],
    ".backends": [
        "Backend", "ShardReader", "ShardWriter", "backend_names", "get_backend", "register_backend",
    ],
    ".codecs": ["Codec", "codec_class", "codec_names", "get_codec", "register_codec"],
}, __all__)
