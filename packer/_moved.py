"""packer 0.1's module paths, kept importable (with a ``DeprecationWarning``) until packer 0.4.

packer 0.1 was flat (``packer.transforms``, ``packer.report``, ``packer.datasets``, ...); 0.2 moved
every module into a subpackage by layer. Code written for 0.1 keeps working: importing an old path
gives a thin alias module whose names are the very objects of their new homes, and warns once, at
import, naming what to import instead. The aliases are made on demand by a finder at the end of
``sys.meta_path`` (so a real module always wins and ``import packer`` stays cheap); the table below
is the whole list, and the "Moving from 0.1" page of the docs is written from it.

Only the paths users could reasonably have imported are here: the homes of 0.1's ``packer.__all__``,
the modules its README named (``packer.transforms``, ``packer.report``, ``packer.batching``) and the
backend modules a plugin author would have read. 0.1's internal machinery (``packer.destination``,
``packer.shardwork``, ...) is not.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["MOVED_MODULES", "REMOVED_IN", "RENAMED", "install", "moved_names", "public_replacements"]

#: The release that drops these paths (and the deprecated names of package namespaces).
REMOVED_IN: Final = "0.4"

#: 0.1 module path -> {module that defines the names now: the names, space-separated}.
MOVED_MODULES: Final[Mapping[str, Mapping[str, str]]] = {
    "packer.backends": {
        "packer.format.backends.base": "Backend ShardReader ShardWriter",
        "packer.format.backends": "backend_names get_backend register_backend",
    },
    "packer.backends.base": {"packer.format.backends.base": "Arena Backend ShardReader ShardWriter"},
    "packer.backends.hdf5": {"packer.format.backends.hdf5": "BACKEND HDF5ShardReader HDF5ShardWriter"},
    "packer.backends.lmdb": {
        "packer.format.backends.lmdb": "BACKEND LMDBShardWriter",
        "packer.format.backends.lmdb_reader": "LMDBShardReader",
    },
    "packer.batching": {
        "packer.read.batching": "POOL_SIZE BatchSample batch_samples new_batch_tensor reuse_batch_memory",
    },
    "packer.codecs": {
        "packer.source.imagecheck": "CHECK_LEVELS DEFAULT_MAX_PIXELS check_image",
        "packer.format.codecs.base": "Codec",
        "packer.format.codecs.jpeg": "JpegCodec",
        "packer.format.codecs.original": "OriginalCodec",
        "packer.format.codecs.pixels": "PixelsCodec",
        "packer.format.codecs.registry": "codec_names get_codec",
    },
    "packer.dask_engine": {
        "packer.conversion.engines.dask_cluster": "JOBQUEUE_KINDS DaskProgress dask_engine job_script "
                                                  "jobqueue_cluster jobqueue_engine",
    },
    "packer.datasets": {
        "packer.read.datasets": "HDF5ImageDataset LMDBImageDataset PackedImageDataset",
        "packer.read.opening": "open_dataset",
    },
    "packer.dryrun": {
        "packer.conversion.dryrun": "ConversionPlan PlannedShard plan_conversion",
        "packer.cli.formatting.conversion": "format_plan",
    },
    "packer.engines": {
        "packer.conversion.engines.select": "ENGINES open_engine",
        "packer.conversion.engines.base": "Engine ProgressChannel task_key",
        "packer.conversion.engines.executor": "ExecutorEngine execute_task",
        "packer.conversion.engines.local": "LocalEngine",
    },
    "packer.export": {
        "packer.tools.export.writer": "ExportResult export_dataset",
        "packer.cli.formatting.dataset": "format_export",
    },
    "packer.folder": {"packer.read.baseline": "ImageFolderDataset pil_loader"},
    "packer.imagefolder": {
        "packer.source.imagefolder": "IMG_EXTENSIONS FolderIndex find_classes scan_imagefolder",
        "packer.source.base": "ScanReport SourceItem",
    },
    "packer.loader": {
        "packer.read.loader": "DEFAULT_PREFETCH MAX_WORKERS SAMPLERS LoaderSettings default_workers "
                              "loader_settings make_loader",
        "packer.read.samplers": "SeededRandomSampler",
        "packer.cpus": "available_cpus",
    },
    "packer.manifest": {
        "packer.format.manifest": "FORMAT_VERSION IN_PROGRESS_NAME MANIFEST_NAME FileEntry Manifest "
                                  "ScanInfo ShardEntry SkippedFile",
    },
    "packer.merging": {
        "packer.conversion.merging": "MergeResult build_manifest finished_shards merge unwritten_shards",
    },
    "packer.normalize": {"packer.read.normalize": "IMAGENET_MEAN IMAGENET_STD Normalize"},
    "packer.preview": {
        "packer.tools.preview.sheet": "MAX_SHEET_PIXELS ContactSheet make_contact_sheet write_contact_sheet",
        "packer.tools.preview.draw": "PAD SheetCell SheetRow",
        "packer.cli.formatting.dataset": "format_sheet",
    },
    "packer.report": {
        "packer.tools.info": "dataset_info",
        "packer.cli.formatting.listing": "append_listing",
        "packer.cli.formatting.measure": "format_bench format_profile format_sweep",
        "packer.cli.formatting.conversion": "format_conversion",
        "packer.cli.formatting.dataset": "format_info format_verify",
    },
    "packer.samplers": {"packer.read.samplers": "ShardAwareSampler"},
    "packer.show": {
        "packer.tools.show": "SampleInfo sample_bytes sample_info save_sample",
        "packer.cli.formatting.dataset": "format_sample_info",
    },
    "packer.transforms": {
        "packer.read.transforms": "BatchTransform CenterCropResize RandomResizedCropFlip",
        "packer.read.normalize": "IMAGENET_MEAN IMAGENET_STD Normalize",
        "packer.read.decoding": "DECODERS",
        "packer.read.resampling": "RESAMPLERS",
        "packer.read.crop_params": "center_crop_box random_resized_crop_params",
        "packer.read.crop_resize": "crop_resize to_uint8_tensor",
    },
    "packer.verify": {
        "packer.tools.findings": "MAX_LISTED Problem VerifyReport",
        "packer.tools.verify": "verify_dataset",
    },
    "packer.verify_report": {"packer.tools.findings": "MAX_LISTED Problem VerifyReport"},
}


#: 0.1 names whose public replacement has another name.
RENAMED: Final[Mapping[str, str]] = {"FolderIndex": "SourceIndex"}


def moved_names(old: str) -> dict[str, str]:
    """``{name: module defining it now}`` for the 0.1 module path ``old``."""
    return {name: home for home, names in MOVED_MODULES[old].items() for name in names.split()}


def public_replacements(old: str) -> tuple[list[str], list[str]]:
    """What to import from ``packer`` instead of ``old``'s names (a renamed one under its new
    name), and the names of ``old`` that are internal now."""
    exported = sys.modules["packer"].__all__  # the package that installed the finder; not imported
    names = moved_names(old)
    public = [RENAMED.get(name, name) for name in names if RENAMED.get(name, name) in exported]
    return public, [name for name in names if RENAMED.get(name, name) not in public]


def _message(old: str) -> str:
    public, internal = public_replacements(old)
    advice = []
    if public:
        advice.append(f"import {', '.join(public)} from 'packer' instead")
    if internal:
        advice.append(f"{', '.join(internal)} {'is' if len(internal) == 1 else 'are'} internal now "
                      "(no stable replacement)")
    return (f"'{old}' is packer 0.1's module path, deprecated since 0.2 and removed in {REMOVED_IN}: "
            f"{'; '.join(advice)}. See the docs page 'Moving from 0.1'.")


class _AliasLoader(importlib.abc.Loader):
    """Makes the alias module of one 0.1 path: its names resolve in their new homes on first use."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        old = module.__name__
        names = moved_names(old)
        module.__doc__ = f"Deprecated alias of packer 0.1's {old!r}; see packer._moved."
        module.__all__ = sorted(names)  # type: ignore[attr-defined]

        def __getattr__(name: str) -> Any:
            if name not in names:
                raise AttributeError(f"module {old!r} has no attribute {name!r}")
            value = getattr(importlib.import_module(names[name]), name)
            setattr(module, name, value)
            return value

        def __dir__() -> list[str]:
            return sorted(set(vars(module)) | set(names))

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        module.__dir__ = __dir__  # type: ignore[method-assign]
        # Warn at the importing line (the import system's frames are skipped).
        warnings.warn(_message(old), DeprecationWarning, stacklevel=2)


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds 0.1's module paths; consulted last, after the real modules."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED_MODULES:
            return None
        is_package = any(other.startswith(fullname + ".") for other in MOVED_MODULES)
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(), is_package=is_package)


def install() -> None:
    """Put the finder at the end of ``sys.meta_path`` (once per process)."""
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())
