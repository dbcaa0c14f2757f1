"""packer: pack an ImageFolder tree into LMDB or HDF5 shards and read it fast in PyTorch.

The public API. Names are imported on first use (PEP 562), so ``import packer`` is cheap, the
command line and conversion workers start fast, and torch is loaded only by the dataset classes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from packer.backends import backend_names, get_backend
    from packer.codecs import codec_names
    from packer.conversion import ConversionResult, TaskResult, convert, convert_task
    from packer.datasets import HDF5ImageDataset, LMDBImageDataset, PackedImageDataset, open_dataset
    from packer.dryrun import ConversionPlan, plan_conversion
    from packer.engines import Engine, ExecutorEngine, LocalEngine, open_engine
    from packer.errors import (
        BadImageError,
        ConversionError,
        ConversionInterrupted,
        DatasetError,
        EmptySourceError,
        IncompleteDatasetError,
        ManifestError,
        MissingExtraError,
        MissingShardsError,
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
    from packer.export import ExportResult, export_dataset
    from packer.folder import ImageFolderDataset
    from packer.imagefolder import IMG_EXTENSIONS, FolderIndex, find_classes, scan_imagefolder
    from packer.loader import LoaderSettings, loader_settings, make_loader
    from packer.manifest import Manifest
    from packer.merging import MergeResult, merge
    from packer.preview import ContactSheet, make_contact_sheet, write_contact_sheet
    from packer.samplers import ShardAwareSampler
    from packer.show import SampleInfo, sample_bytes, sample_info, save_sample
    from packer.sizes import parse_size
    from packer.transforms import CenterCropResize, Normalize, RandomResizedCropFlip
    from packer.verify import VerifyReport, verify_dataset

_HOMES = {
    "packer.backends": ["backend_names", "get_backend"],
    "packer.codecs": ["codec_names"],
    "packer.conversion": ["ConversionResult", "TaskResult", "convert", "convert_task"],
    "packer.datasets": ["HDF5ImageDataset", "LMDBImageDataset", "PackedImageDataset", "open_dataset"],
    "packer.dryrun": ["ConversionPlan", "plan_conversion"],
    "packer.engines": ["Engine", "ExecutorEngine", "LocalEngine", "open_engine"],
    "packer.errors": ["BadImageError", "ConversionError", "ConversionInterrupted", "DatasetError",
                      "EmptySourceError", "IncompleteDatasetError", "ManifestError", "MissingExtraError",
                      "MissingShardsError", "NotADatasetError", "OutputError", "OutputExistsError",
                      "PackerError", "ResumeError", "ShardError", "SourceError", "SourceNotFoundError",
                      "UnknownNameError"],
    "packer.export": ["ExportResult", "export_dataset"],
    "packer.folder": ["ImageFolderDataset"],
    "packer.imagefolder": ["FolderIndex", "IMG_EXTENSIONS", "find_classes", "scan_imagefolder"],
    "packer.loader": ["LoaderSettings", "loader_settings", "make_loader"],
    "packer.manifest": ["Manifest"],
    "packer.merging": ["MergeResult", "merge"],
    "packer.preview": ["ContactSheet", "make_contact_sheet", "write_contact_sheet"],
    "packer.samplers": ["ShardAwareSampler"],
    "packer.show": ["SampleInfo", "sample_bytes", "sample_info", "save_sample"],
    "packer.sizes": ["parse_size"],
    "packer.transforms": ["CenterCropResize", "Normalize", "RandomResizedCropFlip"],
    "packer.verify": ["VerifyReport", "verify_dataset"],
}
_LAZY = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "BadImageError",
    "CenterCropResize",
    "ContactSheet",
    "ConversionError",
    "ConversionInterrupted",
    "ConversionPlan",
    "ConversionResult",
    "DatasetError",
    "EmptySourceError",
    "Engine",
    "ExecutorEngine",
    "ExportResult",
    "FolderIndex",
    "HDF5ImageDataset",
    "IMG_EXTENSIONS",
    "ImageFolderDataset",
    "IncompleteDatasetError",
    "LMDBImageDataset",
    "LoaderSettings",
    "LocalEngine",
    "Manifest",
    "ManifestError",
    "MergeResult",
    "MissingExtraError",
    "MissingShardsError",
    "Normalize",
    "NotADatasetError",
    "OutputError",
    "OutputExistsError",
    "PackedImageDataset",
    "PackerError",
    "RandomResizedCropFlip",
    "ResumeError",
    "SampleInfo",
    "ShardAwareSampler",
    "ShardError",
    "SourceError",
    "SourceNotFoundError",
    "TaskResult",
    "UnknownNameError",
    "VerifyReport",
    "backend_names",
    "codec_names",
    "convert",
    "convert_task",
    "export_dataset",
    "find_classes",
    "get_backend",
    "loader_settings",
    "make_contact_sheet",
    "make_loader",
    "merge",
    "open_dataset",
    "open_engine",
    "parse_size",
    "plan_conversion",
    "sample_bytes",
    "sample_info",
    "save_sample",
    "scan_imagefolder",
    "verify_dataset",
    "write_contact_sheet",
]

if sorted(_LAZY) != __all__:  # the two lists must name the same things
    raise ImportError("packer.__all__ and its lazy imports disagree")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'packer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
