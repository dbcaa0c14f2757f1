"""packer: pack an ImageFolder tree into LMDB or HDF5 shards and read it fast in PyTorch.

The public API: exactly the names of ``__all__`` (pinned by tests/test_public_api.py and listed in
the docs' API reference). Everything under the subpackages is internal and may change in any
release; a public name is only removed after a release in which it warns (docs: "API reference",
the deprecation policy). Names are imported on first use (PEP 562), so ``import packer`` is cheap,
the command line and conversion workers start fast, and torch is loaded only by the dataset classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packer import _moved
from packer.lazy import lazy_exports

if TYPE_CHECKING:
    from packer.conversion.array_run import TaskResult, convert_task
    from packer.conversion.dryrun import ConversionPlan, plan_conversion
    from packer.conversion.engines import (
        Engine,
        EngineRequest,
        ExecutorEngine,
        LocalEngine,
        Progress,
        engine_names,
        open_engine,
        register_engine,
    )
    from packer.conversion.maintenance.gc import GcResult, collect_garbage
    from packer.conversion.maintenance.updating import UpdateResult, update
    from packer.conversion.maintenance.upgrading import UpgradeResult, upgrade
    from packer.conversion.merging import MergeResult, merge
    from packer.conversion.options import ConversionOptions
    from packer.conversion.run import ConversionResult, convert
    from packer.conversion.writing.write import write
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
        SchemaError,
        ShardError,
        ShardWriteError,
        SourceChangedError,
        SourceError,
        SourceNotFoundError,
        StoreError,
        StoreUnavailableError,
        UnknownNameError,
        UnsafeKeyError,
        VersionGoneError,
    )
    from packer.format.backends import Backend, ShardReader, ShardWriter, backend_names, register_backend
    from packer.format.codecs import Codec, codec_names, register_codec
    from packer.format.fields.base import FieldType
    from packer.format.fields.registry import field_type_names, register_field_type
    from packer.format.fields.schema import Field, Schema
    from packer.format.manifest import Manifest
    from packer.read.baseline import ImageFolderDataset
    from packer.read.datasets import HDF5ImageDataset, LMDBImageDataset, PackedImageDataset
    from packer.read.fields.albumentations import Albumentations
    from packer.read.fields.coco_masks import CocoMasks
    from packer.read.fields.collate import collate_fields
    from packer.read.fields.dataset import FieldDataset
    from packer.read.fields.torchvision_v2 import TorchvisionV2
    from packer.read.joint.targets import BoxField, OutlineField
    from packer.read.joint.transforms import JointLetterbox, JointRandomResizedCropFlip, JointScaleJitterCrop
    from packer.read.loader import LoaderSettings, loader_settings, make_loader
    from packer.read.opening import open_dataset
    from packer.read.readahead import ReadAheadSampler
    from packer.read.samplers import ShardAwareSampler
    from packer.read.transforms import CenterCropResize, Normalize, RandomResizedCropFlip
    from packer.read.window_sampler import ShardWindowSampler
    from packer.source.base import ItemReader, ScanReport, Source, SourceIndex, SourceItem, SourceOptions
    from packer.source.imagefolder import IMG_EXTENSIONS, find_classes, scan_imagefolder
    from packer.source.registry import open_source, register_source, source_names
    from packer.store.base import Store
    from packer.store.cache.node import CacheInfo, NodeCache
    from packer.store.urls import open_store, register_store, store_schemes
    from packer.tools.bench import BenchReport, bench
    from packer.tools.demo.run import DemoReport, run_demo
    from packer.tools.export.coco import CocoExport, export_coco
    from packer.tools.export.masks import MaskExport, export_masks
    from packer.tools.export.webdataset import WebDatasetExport, export_webdataset
    from packer.tools.export.writer import ExportResult, export_dataset
    from packer.tools.export.yolo import YoloExport, export_yolo
    from packer.tools.field_stats import field_statistics
    from packer.tools.findings import Problem, VerifyReport
    from packer.tools.info import DatasetInfo, dataset_info, dataset_versions
    from packer.tools.preview.sheet import ContactSheet, make_contact_sheet, write_contact_sheet
    from packer.tools.publish import (
        PushResult,
        RemoteGcResult,
        collect_remote_garbage,
        pull_dataset,
        push_dataset,
    )
    from packer.tools.show import SampleInfo, sample_bytes, sample_info, save_sample
    from packer.tools.verify import verify_dataset

_HOMES = {
    "packer.conversion.run": ["ConversionResult", "convert"],
    "packer.conversion.writing.write": ["write"],
    "packer.format.fields.schema": ["Field", "Schema"],
    "packer.format.fields.base": ["FieldType"],
    "packer.format.fields.registry": ["field_type_names", "register_field_type"],
    "packer.read.fields.dataset": ["FieldDataset"],
    "packer.read.fields.albumentations": ["Albumentations"],
    "packer.read.fields.coco_masks": ["CocoMasks"],
    "packer.read.fields.torchvision_v2": ["TorchvisionV2"],
    "packer.read.joint.targets": ["BoxField", "OutlineField"],
    "packer.read.joint.transforms": ["JointLetterbox", "JointRandomResizedCropFlip", "JointScaleJitterCrop"],
    "packer.read.fields.collate": ["collate_fields"],
    "packer.conversion.options": ["ConversionOptions"],
    "packer.conversion.array_run": ["TaskResult", "convert_task"],
    "packer.conversion.merging": ["MergeResult", "merge"],
    "packer.conversion.dryrun": ["ConversionPlan", "plan_conversion"],
    "packer.conversion.maintenance.updating": ["UpdateResult", "update"],
    "packer.conversion.maintenance.upgrading": ["UpgradeResult", "upgrade"],
    "packer.conversion.maintenance.gc": ["GcResult", "collect_garbage"],
    "packer.conversion.engines": [
        "Engine", "EngineRequest", "ExecutorEngine", "LocalEngine", "Progress", "engine_names", "open_engine",
        "register_engine",
    ],
    "packer.read.datasets": ["HDF5ImageDataset", "LMDBImageDataset", "PackedImageDataset"],
    "packer.read.opening": ["open_dataset"],
    "packer.read.baseline": ["ImageFolderDataset"],
    "packer.read.loader": ["LoaderSettings", "loader_settings", "make_loader"],
    "packer.read.samplers": ["ShardAwareSampler"],
    "packer.read.window_sampler": ["ShardWindowSampler"],
    "packer.read.readahead": ["ReadAheadSampler"],
    "packer.read.transforms": ["CenterCropResize", "Normalize", "RandomResizedCropFlip"],
    "packer.source.base": [
        "ItemReader", "ScanReport", "Source", "SourceIndex", "SourceItem", "SourceOptions"
    ],
    "packer.source.registry": ["open_source", "register_source", "source_names"],
    "packer.source.imagefolder": ["IMG_EXTENSIONS", "find_classes", "scan_imagefolder"],
    "packer.store.base": ["Store"],
    "packer.store.urls": ["open_store", "register_store", "store_schemes"],
    "packer.store.cache.node": ["CacheInfo", "NodeCache"],
    "packer.tools.info": ["DatasetInfo", "dataset_info", "dataset_versions"],
    "packer.tools.field_stats": ["field_statistics"],
    "packer.tools.verify": ["verify_dataset"],
    "packer.tools.findings": ["Problem", "VerifyReport"],
    "packer.tools.export.writer": ["ExportResult", "export_dataset"],
    "packer.tools.export.webdataset": ["WebDatasetExport", "export_webdataset"],
    "packer.tools.export.yolo": ["YoloExport", "export_yolo"],
    "packer.tools.export.masks": ["MaskExport", "export_masks"],
    "packer.tools.export.coco": ["CocoExport", "export_coco"],
    "packer.tools.show": ["SampleInfo", "sample_bytes", "sample_info", "save_sample"],
    "packer.tools.preview.sheet": ["ContactSheet", "make_contact_sheet", "write_contact_sheet"],
    "packer.tools.bench": ["BenchReport", "bench"],
    "packer.tools.demo.run": ["DemoReport", "run_demo"],
    "packer.tools.publish": [
        "PushResult", "RemoteGcResult", "collect_remote_garbage", "pull_dataset", "push_dataset"
    ],
    "packer.format.manifest": ["Manifest"],
    "packer.format.backends": ["Backend", "ShardReader", "ShardWriter", "backend_names", "register_backend"],
    "packer.format.codecs": ["Codec", "codec_names", "register_codec"],
    "packer.errors": [
        "AccessDeniedError", "BadImageError", "BucketNotFoundError", "CacheError", "ConversionError",
        "ConversionInterrupted", "DatasetBusyError", "DatasetError", "EmptySourceError",
        "IncompleteDatasetError", "IntegrityError", "ManifestError", "MissingExtraError",
        "MissingShardsError", "NotADatasetError", "ObjectNotFoundError", "OutputError", "OutputExistsError",
        "PackerError", "ResumeError", "SchemaError", "ShardError", "ShardWriteError", "SourceChangedError",
        "SourceError",
        "SourceNotFoundError", "StoreError", "StoreUnavailableError", "UnknownNameError", "UnsafeKeyError",
        "VersionGoneError",
    ],
}
__all__ = [
    "AccessDeniedError",
    "Albumentations",
    "Backend",
    "BadImageError",
    "BoxField",
    "BenchReport",
    "BucketNotFoundError",
    "CacheError",
    "CacheInfo",
    "CenterCropResize",
    "CocoMasks",
    "Codec",
    "ContactSheet",
    "ConversionError",
    "ConversionInterrupted",
    "ConversionOptions",
    "ConversionPlan",
    "ConversionResult",
    "DatasetBusyError",
    "DatasetError",
    "DatasetInfo",
    "DemoReport",
    "EmptySourceError",
    "Engine",
    "EngineRequest",
    "ExecutorEngine",
    "ExportResult",
    "TorchvisionV2",
    "WebDatasetExport",
    "YoloExport",
    "MaskExport",
    "CocoExport",
    "Field",
    "FieldDataset",
    "FieldType",
    "GcResult",
    "HDF5ImageDataset",
    "IMG_EXTENSIONS",
    "ImageFolderDataset",
    "IncompleteDatasetError",
    "JointLetterbox",
    "JointRandomResizedCropFlip",
    "JointScaleJitterCrop",
    "IntegrityError",
    "ItemReader",
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
    "OutlineField",
    "OutputError",
    "OutputExistsError",
    "PackedImageDataset",
    "PackerError",
    "Problem",
    "Progress",
    "PushResult",
    "RandomResizedCropFlip",
    "ReadAheadSampler",
    "RemoteGcResult",
    "ResumeError",
    "SampleInfo",
    "ScanReport",
    "Schema",
    "SchemaError",
    "ShardAwareSampler",
    "ShardWindowSampler",
    "ShardError",
    "ShardReader",
    "ShardWriteError",
    "ShardWriter",
    "Source",
    "SourceChangedError",
    "SourceError",
    "SourceIndex",
    "SourceItem",
    "SourceNotFoundError",
    "SourceOptions",
    "Store",
    "StoreError",
    "StoreUnavailableError",
    "TaskResult",
    "UnknownNameError",
    "UnsafeKeyError",
    "UpdateResult",
    "UpgradeResult",
    "VerifyReport",
    "VersionGoneError",
    "backend_names",
    "bench",
    "codec_names",
    "collate_fields",
    "collect_garbage",
    "collect_remote_garbage",
    "convert",
    "convert_task",
    "dataset_info",
    "dataset_versions",
    "engine_names",
    "export_dataset",
    "export_webdataset",
    "export_yolo",
    "export_masks",
    "export_coco",
    "field_statistics",
    "field_type_names",
    "find_classes",
    "loader_settings",
    "make_contact_sheet",
    "make_loader",
    "merge",
    "open_dataset",
    "open_engine",
    "open_source",
    "open_store",
    "plan_conversion",
    "pull_dataset",
    "push_dataset",
    "register_backend",
    "register_codec",
    "register_engine",
    "register_field_type",
    "register_source",
    "register_store",
    "run_demo",
    "sample_bytes",
    "sample_info",
    "save_sample",
    "scan_imagefolder",
    "source_names",
    "store_schemes",
    "update",
    "upgrade",
    "verify_dataset",
    "write",
    "write_contact_sheet",
]

#: Names ``packer`` exported before and no longer does: they resolve with a DeprecationWarning
#: until packer 0.4.
_DEPRECATED = {
    "FolderIndex": ("packer.source.imagefolder", "it is packer.SourceIndex (what scan_imagefolder returns)"),
    "get_backend": ("packer.format.backends", "backends are internal objects chosen by name "
                    "(to='lmdb'); list them with packer.backend_names() and add one with "
                    "packer.register_backend()"),
    "SOURCES": ("packer.source.registry", "use packer.source_names() and packer.register_source()"),
    "parse_size": ("packer.sizes", "every size argument takes text ('512MB', '50GB') as it is; "
                   "parse sizes for your own options with your own code"),
}

__getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__, deprecated=_DEPRECATED)
_moved.install()
