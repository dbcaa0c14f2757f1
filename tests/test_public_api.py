"""The public API is chosen on purpose: this file pins it, so that changing it is a decision.

Adding a name: add it to ``PUBLIC`` here, to ``packer.__all__`` and to the API reference. Removing
or renaming one: deprecate it first (``packer/lazy.py``'s ``deprecated=``, one release with a
warning; see docs/reference/api.md, "What is public, and how it changes").
"""

from __future__ import annotations

import importlib
import re
import warnings
from pathlib import Path

import pytest

import packer
import packer.errors

API_PAGE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "api.md"

ERRORS = sorted(packer.errors.__all__)

PUBLIC = sorted([
    # converting, updating, versions
    "convert", "ConversionResult", "ConversionOptions", "convert_task", "TaskResult", "merge",
    "MergeResult", "plan_conversion", "ConversionPlan", "update", "UpdateResult", "upgrade",
    "UpgradeResult", "collect_garbage", "GcResult",
    # engines
    "Engine", "EngineRequest", "ExecutorEngine", "LocalEngine", "Progress", "engine_names", "open_engine",
    "register_engine",
    # reading
    "open_dataset", "PackedImageDataset", "LMDBImageDataset", "HDF5ImageDataset", "ImageFolderDataset",
    "make_loader", "loader_settings", "LoaderSettings", "ShardAwareSampler", "ShardWindowSampler",
    "ReadAheadSampler",
    "CenterCropResize", "Normalize", "RandomResizedCropFlip",
    # sources
    "open_source", "register_source", "source_names", "Source", "SourceOptions", "SourceIndex",
    "SourceItem", "ScanReport", "ItemReader", "scan_imagefolder", "find_classes", "IMG_EXTENSIONS",
    # tools
    "dataset_info", "DatasetInfo", "dataset_versions", "field_statistics", "verify_dataset", "VerifyReport",
    "Problem",
    "export_dataset", "ExportResult", "export_webdataset", "WebDatasetExport",
    "export_yolo", "YoloExport", "export_masks", "MaskExport",
    "export_coco", "CocoExport",
    "sample_info", "SampleInfo", "sample_bytes", "save_sample", "make_contact_sheet",
    "write_contact_sheet", "ContactSheet", "bench", "BenchReport", "run_demo", "DemoReport",
    # remote storage
    "push_dataset", "PushResult", "collect_remote_garbage", "RemoteGcResult", "pull_dataset",
    "open_store", "register_store", "store_schemes", "Store", "NodeCache", "CacheInfo",
    # format and extension points
    "Manifest", "Backend", "ShardWriter", "ShardReader", "backend_names", "register_backend", "Codec",
    "codec_names", "register_codec",
    # samples with fields
    "write", "Schema", "Field", "FieldType", "field_type_names", "register_field_type", "FieldDataset",
    "collate_fields", "Albumentations", "TorchvisionV2", "CocoMasks", "JointRandomResizedCropFlip",
    "JointScaleJitterCrop", "JointLetterbox",
    "BoxField", "OutlineField",
]) + ERRORS

#: The plugin contract suites (``packer.testing``, documented on the same page).
TESTING = ["BackendContract", "CodecContract", "EngineContract", "FieldSourceContract", "SourceContract",
           "StoreContract", "field_values"]

#: What packer 0.2.0 exported and no longer does; each still resolves, with a warning.
DEPRECATED = {"packer": ["FolderIndex", "SOURCES", "get_backend", "parse_size"],
              "packer.conversion": ["ArrayTask", "DEFAULT_SHARD_SIZE", "Destination", "DestinationState",
                                    "ENGINES", "PlannedShard", "array_task", "dry_run", "run_conversion",
                                    "run_conversion_task"],
              "packer.source": ["FolderIndex", "SOURCES", "UnpackableFile", "check_image", "read_source"],
              "packer.store": ["LocalStore", "STORES", "is_url"],
              "packer.format": ["ShardSet", "get_backend", "get_codec", "FORMAT_VERSION"],
              "packer.read": ["IMAGENET_MEAN", "SeededRandomSampler"],
              "packer.tools": ["sweep", "make_demo_tree"],
              "packer.conversion.engines": ["ENGINES", "ProgressChannel"]}

#: packer 0.1's ``packer.__all__``: every name must still resolve from ``packer``.
PUBLIC_0_1 = [
    "BadImageError", "CenterCropResize", "ContactSheet", "ConversionError", "ConversionInterrupted",
    "ConversionPlan", "ConversionResult", "DatasetError", "EmptySourceError", "Engine", "ExecutorEngine",
    "ExportResult", "FolderIndex", "HDF5ImageDataset", "IMG_EXTENSIONS", "ImageFolderDataset",
    "IncompleteDatasetError", "LMDBImageDataset", "LoaderSettings", "LocalEngine", "Manifest",
    "ManifestError", "MergeResult", "MissingExtraError", "MissingShardsError", "Normalize",
    "NotADatasetError", "OutputError", "OutputExistsError", "PackedImageDataset", "PackerError",
    "RandomResizedCropFlip", "ResumeError", "SampleInfo", "ShardAwareSampler", "ShardError", "SourceError",
    "SourceNotFoundError", "TaskResult", "UnknownNameError", "VerifyReport", "backend_names",
    "codec_names", "convert", "convert_task", "export_dataset", "find_classes", "get_backend",
    "loader_settings", "make_contact_sheet", "make_loader", "merge", "open_dataset", "open_engine",
    "parse_size", "plan_conversion", "sample_bytes", "sample_info", "save_sample", "scan_imagefolder",
    "verify_dataset", "write_contact_sheet",
]


def test_the_public_names_are_pinned() -> None:
    assert sorted(packer.__all__) == sorted(PUBLIC), (
        "packer.__all__ changed: a public name is a promise. Update PUBLIC here and the API "
        "reference on purpose, and deprecate (never just drop) a name users may have used.")
    assert len(set(PUBLIC)) == len(PUBLIC)
    testing = importlib.import_module("packer.testing")
    assert sorted(testing.__all__) == TESTING


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_resolves_without_warning(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        value = getattr(packer, name)
    assert value is not None
    assert name in dir(packer)


def test_the_api_reference_lists_exactly_the_public_names() -> None:
    page = API_PAGE.read_text(encoding="utf-8")
    documented = re.findall(r"^::: (packer\.[\w.]+)\s*$", page, re.MULTILINE)
    short = {path.rsplit(".", 1)[1] for path in documented
             if path != "packer.errors" and not path.startswith("packer.testing.")}
    contracts = sorted(path.rsplit(".", 1)[1] for path in documented if path.startswith("packer.testing."))
    assert contracts == TESTING
    assert "packer.errors" in documented  # the exception tree, whole
    public = set(PUBLIC) - set(ERRORS)
    assert sorted(public - short) == [], "public names missing from the API reference"
    assert sorted(short - public) == [], "the API reference documents names that are not public"
    for path in documented:  # each entry names the object that packer exports
        module, _, name = path.rpartition(".")
        if path != "packer.errors" and not path.startswith("packer.testing."):
            assert getattr(importlib.import_module(module), name) is getattr(packer, name), path


#: The layer packages: each exports the public names homed in it, and nothing else. (Modules below
#: them, the backend and codec registries included, are internal and export to the layers above.)
LAYERS = ["packer.conversion", "packer.conversion.engines", "packer.format", "packer.read", "packer.source",
          "packer.store", "packer.tools"]


@pytest.mark.parametrize("package", LAYERS)
def test_subpackages_export_only_public_names(package: str) -> None:
    module = importlib.import_module(package)
    assert set(module.__all__) <= set(PUBLIC), sorted(set(module.__all__) - set(PUBLIC))
    for name in module.__all__:
        assert getattr(module, name) is getattr(packer, name)


@pytest.mark.parametrize(("package", "name"), [(p, n) for p, names in DEPRECATED.items() for n in names])
def test_names_no_longer_exported_still_resolve_with_a_warning(package: str, name: str) -> None:
    module = importlib.import_module(package)
    assert name not in module.__all__ and name not in dir(module)
    with pytest.warns(DeprecationWarning, match=rf"'{re.escape(package)}\.{name}' is deprecated.*0\.4"):
        value = getattr(module, name)
    assert value is not None


def test_deprecated_names_are_the_objects_they_were() -> None:
    from packer.conversion.destination.state import Destination
    from packer.format.backends import get_backend
    from packer.source.base import SourceIndex

    with pytest.warns(DeprecationWarning):
        assert packer.get_backend is get_backend
    with pytest.warns(DeprecationWarning, match="packer.SourceIndex"):
        assert packer.FolderIndex is SourceIndex
    with pytest.warns(DeprecationWarning):
        from packer.conversion import Destination as old  # type: ignore[attr-defined]
    assert old is Destination


def test_every_name_of_0_1s_top_level_still_resolves() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        missing = [name for name in PUBLIC_0_1 if not hasattr(packer, name)]
    assert missing == []


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        packer.nope  # type: ignore[attr-defined]  # noqa: B018
