"""Layer 3, the torch side: datasets, samplers, DataLoader settings and the fast-path transforms.

Never imports :mod:`packer.conversion` (nor the other way round). Names are imported on first
use, so importing a submodule does not load every other one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packer.lazy import lazy_exports

if TYPE_CHECKING:
    from packer.read.baseline import ImageFolderDataset
    from packer.read.batching import BatchSample, reuse_batch_memory
    from packer.read.datasets import HDF5ImageDataset, LMDBImageDataset, PackedImageDataset, open_dataset
    from packer.read.loader import LoaderSettings, loader_settings, make_loader
    from packer.read.readahead import ReadAheadSampler
    from packer.read.samplers import SeededRandomSampler, ShardAwareSampler
    from packer.read.speedups import accelerators
    from packer.read.transforms import (
        IMAGENET_MEAN,
        IMAGENET_STD,
        BatchTransform,
        CenterCropResize,
        Normalize,
        RandomResizedCropFlip,
    )

__all__ = ["BatchSample", "BatchTransform", "CenterCropResize", "HDF5ImageDataset", "IMAGENET_MEAN",
           "IMAGENET_STD", "ImageFolderDataset", "LMDBImageDataset", "LoaderSettings", "Normalize",
           "PackedImageDataset", "RandomResizedCropFlip", "ReadAheadSampler", "SeededRandomSampler",
           "ShardAwareSampler", "accelerators", "loader_settings", "make_loader", "open_dataset",
           "reuse_batch_memory"]
__getattr__, __dir__ = lazy_exports(__name__, {
    ".datasets": ["HDF5ImageDataset", "LMDBImageDataset", "PackedImageDataset", "open_dataset"],
    ".baseline": ["ImageFolderDataset"],
    ".samplers": ["SeededRandomSampler", "ShardAwareSampler"],
    ".readahead": ["ReadAheadSampler"],
    ".loader": ["LoaderSettings", "loader_settings", "make_loader"],
    ".transforms": [
        "BatchTransform", "CenterCropResize", "IMAGENET_MEAN", "IMAGENET_STD", "Normalize",
        "RandomResizedCropFlip",
    ],
    ".batching": ["BatchSample", "reuse_batch_memory"],
    ".speedups": ["accelerators"],
}, __all__)
