"""Layer 3, the on-disk format: manifest, sample index, shard set, codecs and storage backends.

What a packed dataset is on disk, and how its bytes are written and read, without torch.
Names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packer.lazy import lazy_exports

if TYPE_CHECKING:
    from packer.format.backends import Backend, ShardReader, ShardWriter, backend_names, register_backend
    from packer.format.codecs import Codec, codec_names, register_codec
    from packer.format.manifest import Manifest

__all__ = ["Backend", "Codec", "Manifest", "ShardReader", "ShardWriter", "backend_names", "codec_names",
           "register_backend", "register_codec"]
_INTERNAL = "it is internal (its module may change in any release)"
__getattr__, __dir__ = lazy_exports(__name__, {
    ".manifest": ["Manifest"],
    ".backends": ["Backend", "ShardReader", "ShardWriter", "backend_names", "register_backend"],
    ".codecs": ["Codec", "codec_names", "register_codec"],
}, __all__, deprecated={
    **{name: (".manifest", _INTERNAL) for name in (
        "FORMAT_VERSION", "FileEntry", "IN_PROGRESS_NAME", "MANIFEST_NAME", "ScanInfo", "ShardEntry",
        "SkippedFile")},
    "INDEX_FILES": (".sample_index", _INTERNAL),
    "SampleIndex": (".sample_index", _INTERNAL),
    "ShardSet": (".shardset", _INTERNAL),
    "get_backend": (".backends", "choose a backend by name (to='lmdb')"),
    **{name: (".codecs", _INTERNAL) for name in ("codec_class", "get_codec")},
})
