"""packer: pack an ImageFolder tree into LMDB or HDF5 shards and read it fast in PyTorch.

The public API. Names are imported on first use (PEP 562), so ``import packer`` is cheap, the
command line and conversion workers start fast, and torch is loaded only by the dataset classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packer.lazy import lazy_exports

if TYPE_CHECKING:
    from packer.conversion.array_run import TaskResult, convert_task
    from packer.conversion.dryrun import ConversionPlan, plan_conversion
    from packer.conversion.engines import Engine, ExecutorEngine, LocalEngine, open_engine
    from packer.conversion.gc import GcResult, collect_garbage
    from packer.conversion.merging import MergeResult, merge
    from packer.conversion.run import ConversionResult, convert
    from packer.conversion.updating import UpdateResult, update
    from packer.errors import (
        AccessDeniedError,
        BadImageError,
        BucketNotFoundError,
        CacheError,
        ConversionError,
        ConversionInterrupted,
        DatasetBusyError,
        DatasetError,
        EmptySourceError,
        IncompleteDatasetError,
        IntegrityError,
        ManifestError,
        MissingExtraError,
        MissingShardsError,
        NotADatasetError,
        ObjectNotFoundError,
        OutputError,
        OutputExistsError,
        PackerError,
        ResumeError,
        ShardError,
        SourceError,
        SourceNotFoundError,
        StoreError,
        StoreUnavailableError,
        UnknownNameError,
        VersionGoneError,
    )
    from packer.format.backends import backend_names, get_backend
    from packer.format.codecs import codec_names
    from packer.format.manifest import Manifest
    from packer.read.baseline import ImageFolderDataset
    from packer.read.datasets import HDF5ImageDataset, LMDBImageDataset, PackedImageDataset, open_dataset
    from packer.read.loader import LoaderSettings, loader_settings, make_loader
    from packer.read.readahead import ReadAheadSampler
    from packer.read.samplers import ShardAwareSampler
    from packer.read.transforms import CenterCropResize, Normalize, RandomResizedCropFlip
    from packer.sizes import parse_size
    from packer.source.base import Source, SourceItem, SourceOptions
    from packer.source.imagefolder import IMG_EXTENSIONS, FolderIndex, find_classes, scan_imagefolder
    from packer.source.registry import SOURCES, open_source
    from packer.store.base import Store
    from packer.store.cache import CacheInfo, NodeCache
    from packer.store.urls import open_store
    from packer.tools.export import ExportResult, export_dataset
    from packer.tools.preview import ContactSheet, make_contact_sheet, write_contact_sheet
    from packer.tools.publish import (
        PushResult,
        RemoteGcResult,
        collect_remote_garbage,
        pull_dataset,
        push_dataset,
    )
    from packer.tools.show import SampleInfo, sample_bytes, sample_info, save_sample
    from packer.tools.verify import VerifyReport, verify_dataset

_HOMES = {
    "packer.format.backends": ["backend_names", "get_backend"],
    "packer.format.codecs": ["codec_names"],
    "packer.conversion.run": ["ConversionResult", "convert"],
    "packer.conversion.updating": ["UpdateResult", "update"],
    "packer.conversion.gc": ["GcResult", "collect_garbage"],
    "packer.conversion.array_run": ["TaskResult", "convert_task"],
    "packer.read.datasets": ["HDF5ImageDataset", "LMDBImageDataset", "PackedImageDataset", "open_dataset"],
    "packer.conversion.dryrun": ["ConversionPlan", "plan_conversion"],
    "packer.conversion.engines": ["Engine", "ExecutorEngine", "LocalEngine", "open_engine"],
    "packer.errors": ["BadImageError", "ConversionError", "ConversionInterrupted", "DatasetBusyError",
                      "DatasetError",
                      "EmptySourceError", "IncompleteDatasetError", "ManifestError", "MissingExtraError",
                      "MissingShardsError", "NotADatasetError", "OutputError", "OutputExistsError",
                      "PackerError", "ResumeError", "ShardError", "SourceError", "SourceNotFoundError",
                      "UnknownNameError", "VersionGoneError", "StoreError", "ObjectNotFoundError",
                      "BucketNotFoundError", "AccessDeniedError", "StoreUnavailableError",
                      "IntegrityError", "CacheError"],
    "packer.store.base": ["Store"],
    "packer.store.cache": ["CacheInfo", "NodeCache"],
    "packer.store.urls": ["open_store"],
    "packer.tools.publish": ["PushResult", "RemoteGcResult", "collect_remote_garbage", "pull_dataset",
                             "push_dataset"],
    "packer.tools.export": ["ExportResult", "export_dataset"],
    "packer.read.baseline": ["ImageFolderDataset"],
    "packer.source.imagefolder": ["FolderIndex", "IMG_EXTENSIONS", "find_classes", "scan_imagefolder"],
    "packer.source.base": ["Source", "SourceItem", "SourceOptions"],
    "packer.source.registry": ["SOURCES", "open_source"],
    "packer.read.loader": ["LoaderSettings", "loader_settings", "make_loader"],
    "packer.format.manifest": ["Manifest"],
    "packer.conversion.merging": ["MergeResult", "merge"],
    "packer.tools.preview": ["ContactSheet", "make_contact_sheet", "write_contact_sheet"],
    "packer.read.samplers": ["ShardAwareSampler"],
    "packer.read.readahead": ["ReadAheadSampler"],
    "packer.tools.show": ["SampleInfo", "sample_bytes", "sample_info", "save_sample"],
    "packer.sizes": ["parse_size"],
    "packer.read.transforms": ["CenterCropResize", "Normalize", "RandomResizedCropFlip"],
    "packer.tools.verify": ["VerifyReport", "verify_dataset"],
}
__all__ = [
    "AccessDeniedError",
    "BadImageError",
    "BucketNotFoundError",
    "CacheError",
    "CacheInfo",
    "CenterCropResize",
    "ContactSheet",
    "ConversionError",
    "ConversionInterrupted",
    "ConversionPlan",
    "ConversionResult",
    "DatasetBusyError",
    "DatasetError",
    "EmptySourceError",
    "Engine",
    "ExecutorEngine",
    "ExportResult",
    "FolderIndex",
    "GcResult",
    "HDF5ImageDataset",
    "IMG_EXTENSIONS",
    "ImageFolderDataset",
    "IncompleteDatasetError",
    "IntegrityError",
    "LMDBImageDataset",
    "LoaderSettings",
    "LocalEngine",
    "Manifest",
    "ManifestError",
    "MergeResult",
    "MissingExtraError",
    "MissingShardsError",
    "NodeCache",
    "Normalize",
    "NotADatasetError",
    "ObjectNotFoundError",
    "OutputError",
    "OutputExistsError",
    "PackedImageDataset",
    "PackerError",
    "PushResult",
    "RandomResizedCropFlip",
    "RemoteGcResult",
    "ReadAheadSampler",
    "ResumeError",
    "SampleInfo",
    "ShardAwareSampler",
    "SOURCES",
    "ShardError",
    "Source",
    "SourceError",
    "SourceItem",
    "SourceNotFoundError",
    "SourceOptions",
    "Store",
    "StoreError",
    "StoreUnavailableError",
    "TaskResult",
    "UnknownNameError",
    "UpdateResult",
    "VerifyReport",
    "VersionGoneError",
    "backend_names",
    "codec_names",
    "collect_garbage",
    "collect_remote_garbage",
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
    "open_source",
    "open_store",
    "parse_size",
    "plan_conversion",
    "pull_dataset",
    "push_dataset",
    "sample_bytes",
    "sample_info",
    "save_sample",
    "scan_imagefolder",
    "update",
    "verify_dataset",
    "write_contact_sheet",
]

__getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
