"""packer: pack an ImageFolder tree into LMDB or HDF5 shards and read it fast in PyTorch.

The public API. Dataset classes import torch on first use, so converting, inspecting and the
command line work without loading torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from packer.backends import backend_names, get_backend
from packer.codecs import codec_names
from packer.convert import ConversionResult, convert
from packer.dryrun import ConversionPlan, plan_conversion
from packer.errors import (
    BadImageError,
    ConversionError,
    ConversionInterrupted,
    DatasetError,
    EmptySourceError,
    IncompleteDatasetError,
    ManifestError,
    NotADatasetError,
    OutputError,
    OutputExistsError,
    PackerError,
    ResumeError,
    ShardError,
    SourceError,
    SourceNotFoundError,
    UnknownNameError,
)
from packer.imagefolder import IMG_EXTENSIONS, FolderIndex, find_classes, scan_imagefolder
from packer.manifest import Manifest
from packer.sizes import parse_size
from packer.verify import VerifyReport, verify_dataset

if TYPE_CHECKING:
    from packer.datasets import HDF5ImageDataset, LMDBImageDataset, PackedImageDataset, open_dataset
    from packer.folder import ImageFolderDataset

__all__ = [
    "IMG_EXTENSIONS", "BadImageError", "ConversionError", "ConversionInterrupted", "ConversionPlan",
    "ConversionResult", "DatasetError", "EmptySourceError", "ResumeError", "VerifyReport",
    "plan_conversion", "verify_dataset",
    "FolderIndex", "HDF5ImageDataset", "ImageFolderDataset", "IncompleteDatasetError",
    "LMDBImageDataset", "Manifest", "ManifestError", "NotADatasetError", "OutputError",
    "OutputExistsError", "PackedImageDataset", "PackerError", "ShardError", "SourceError",
    "SourceNotFoundError", "UnknownNameError", "backend_names", "codec_names", "convert",
    "find_classes", "get_backend", "open_dataset", "parse_size", "scan_imagefolder",
]

_LAZY = {
    "HDF5ImageDataset": "packer.datasets", "LMDBImageDataset": "packer.datasets",
    "PackedImageDataset": "packer.datasets", "open_dataset": "packer.datasets",
    "ImageFolderDataset": "packer.folder",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'packer' has no attribute {name!r}")
