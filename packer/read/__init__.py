"""Layer 4, the torch side: datasets, samplers, DataLoader settings and the fast-path transforms.

Never imports :mod:`packer.conversion` (nor the other way round). Names are imported on first
use, so importing a submodule does not load every other one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packer.lazy import lazy_exports

if TYPE_CHECKING:
    from packer.read.baseline import ImageFolderDataset
    from packer.read.datasets import HDF5ImageDataset, LMDBImageDataset, PackedImageDataset
    from packer.read.loader import LoaderSettings, loader_settings, make_loader
    from packer.read.opening import open_dataset
    from packer.read.readahead import ReadAheadSampler
    from packer.read.samplers import ShardAwareSampler
    from packer.read.transforms import CenterCropResize, Normalize, RandomResizedCropFlip

__all__ = ["CenterCropResize", "HDF5ImageDataset", "ImageFolderDataset", "LMDBImageDataset", "LoaderSettings",
           "Normalize", "PackedImageDataset", "RandomResizedCropFlip", "ReadAheadSampler",
           "ShardAwareSampler", "loader_settings", "make_loader", "open_dataset"]
_INTERNAL = "it is internal (its module may change in any release)"
__getattr__, __dir__ = lazy_exports(__name__, {
    ".datasets": ["HDF5ImageDataset", "LMDBImageDataset", "PackedImageDataset"],
    ".opening": ["open_dataset"],
    ".baseline": ["ImageFolderDataset"],
    ".samplers": ["ShardAwareSampler"],
    ".readahead": ["ReadAheadSampler"],
    ".loader": ["LoaderSettings", "loader_settings", "make_loader"],
    ".transforms": ["CenterCropResize", "Normalize", "RandomResizedCropFlip"],
}, __all__, deprecated={
    "SeededRandomSampler": (".samplers", _INTERNAL),
    "BatchTransform": (".transforms", _INTERNAL),
    "IMAGENET_MEAN": (".transforms", "Normalize() defaults to it"),
    "IMAGENET_STD": (".transforms", "Normalize() defaults to it"),
    "BatchSample": (".batching", _INTERNAL),
    "reuse_batch_memory": (".batching", "make_loader() sets it up"),
    "accelerators": (".speedups", _INTERNAL),
})
