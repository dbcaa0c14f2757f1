"""The contract suites of :mod:`packer.testing`, run for every built-in implementation and for
a third-party one of each kind (tests/contract_plugins.py), registered only for its tests.

Each class is what a plugin author writes: one line naming the implementation (a source adds how
to write a tree in its format; a store on a server opens it from the server's fixture).
"""

from __future__ import annotations

import csv
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
from contract_plugins import RECORD_LOG, DirectoryStore, KeyedCSVSource, PngCodec, open_pool
from parquet_tools import Row, tree_rows, write_tables
from sourcekinds import add_member, write_tar, write_tar_of_tars, write_webdataset, write_zip

from packer.conversion.engines.select import ENGINES
from packer.format.backends import BACKENDS, get_backend
from packer.format.codecs import JpegCodec, OriginalCodec, PixelsCodec
from packer.format.codecs.registry import CODECS
from packer.source.registry import SOURCES
from packer.store.base import Store
from packer.store.urls import STORES, open_store
from packer.testing import (
    BackendContract,
    CodecContract,
    EngineContract,
    FieldSourceContract,
    SourceContract,
    StoreContract,
    field_values,
)
from packer.testing.trees import ImageTree

# -- backends --------------------------------------------------------------------------------


class TestLMDBBackend(BackendContract):
    backend = get_backend("lmdb")


class TestHDF5Backend(BackendContract):
    backend = get_backend("hdf5")


class TestRecordLogPluginBackend(BackendContract):
    backend = RECORD_LOG

# -- codecs ----------------------------------------------------------------------------------


class TestOriginalCodec(CodecContract):
    codec = OriginalCodec()


class TestJpegCodec(CodecContract):
    codec = JpegCodec(quality=80, resize=24)


class TestPixelsCodec(CodecContract):
    codec = PixelsCodec(resize=16)


class TestPngPluginCodec(CodecContract):
    codec = PngCodec(level=3)

# -- engines ---------------------------------------------------------------------------------


class TestLocalEngine(EngineContract):
    engine = "local"


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Port 8787 is already in use")  # the Ctrl-C test's second cluster
class TestDaskEngine(EngineContract):
    engine = "dask"

    @pytest.fixture(autouse=True, scope="class")
    def _dask_installed(self) -> None:
        pytest.importorskip("distributed", reason="the dask extra is not installed")


class TestPoolPluginEngine(EngineContract):
    engine = "pool"
    opener = open_pool

# -- stores ----------------------------------------------------------------------------------


class TestLocalStore(StoreContract):
    url = "{tmp_path}/store"


class TestS3Store(StoreContract):
    @pytest.fixture
    def store(self, s3_bucket: str, s3_env: Any) -> Store:
        return open_store(f"{s3_bucket}/root", {"retries": 2, "timeout": 10})


class TestAzureStore(StoreContract):
    """adlfs against Azurite, Microsoft's emulator: conditional creates (the lease's) included."""

    @pytest.fixture
    def store(self, azure_container: tuple[str, dict[str, str]]) -> Store:
        url, options = azure_container
        return open_store(f"{url}/root", {**options, "retries": 2, "timeout": 10})


class TestHTTPStore(StoreContract):
    """Read-only: the objects are files the server serves."""

    @pytest.fixture
    def store(self, http_server: Any) -> Store:
        self.served = Path(http_server.root)
        return open_store(http_server.url)

    def put_objects(self, store: Store, objects: Any) -> None:
        for key, data in objects.items():
            path = self.served.joinpath(*key.split("/"))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


class TestDirectoryPluginStore(StoreContract):
    url = "dirstore://{tmp_path}/store"
    store_class = DirectoryStore

#: The URL scheme each store class tests (the server fixtures choose their URLs).
STORE_SCHEMES = {TestLocalStore: "file", TestS3Store: "s3", TestHTTPStore: "http", TestAzureStore: "az",
                 TestDirectoryPluginStore: "dirstore"}

# -- sources ---------------------------------------------------------------------------------


def _list_file(tree: ImageTree, path: Path) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "label"])
        writer.writerows((relpath, tree.classes[label]) for relpath, label in tree.files)
    return path


class TestTreeSource(SourceContract):
    kind = "tree"

    def write_source(self, tree: ImageTree, work: Path) -> tuple[Path, dict[str, Any]]:
        return Path(shutil.copytree(tree.root, work / "tree")), {}


class TestListSource(SourceContract):
    kind = "list"

    def write_source(self, tree: ImageTree, work: Path) -> tuple[Path, dict[str, Any]]:
        return _list_file(tree, work / "list.csv"), {"root": tree.root}


class TestListInATarSource(SourceContract):
    kind = "list"

    def write_source(self, tree: ImageTree, work: Path) -> tuple[Path, dict[str, Any]]:
        return _list_file(tree, work / "list.csv"), {"root": write_tar(tree.root, work / "root.tar")}


class TestTarSource(SourceContract):
    kind = "archive"

    def write_source(self, tree: ImageTree, work: Path) -> tuple[Path, dict[str, Any]]:
        return write_tar(tree.root, work / "train.tar.gz", compress=True), {}


class TestZipSource(SourceContract):
    kind = "archive"

    def write_source(self, tree: ImageTree, work: Path) -> tuple[Path, dict[str, Any]]:
        return write_zip(tree.root, work / "train.zip", top="train"), {}


class TestTarOfClassTarsSource(SourceContract):
    kind = "archive"

    def write_source(self, tree: ImageTree, work: Path) -> tuple[Path, dict[str, Any]]:
        return write_tar_of_tars(tree.root, work / "classes.tar"), {}


class TestWebDatasetSource(SourceContract):
    kind = "webdataset"

    def write_source(self, tree: ImageTree, work: Path) -> tuple[Path, dict[str, Any]]:
        shards = write_webdataset(tree.root, work / "shards", per_shard=7)
        return shards[0].parent, {"label_field": "json:label"}


class TestWebDatasetClassNumberSource(SourceContract):
    kind = "webdataset"
    same_class_names = False  # ``.cls`` members: classes are named by number

    def write_source(self, tree: ImageTree, work: Path) -> tuple[Path, dict[str, Any]]:
        return write_webdataset(tree.root, work / "shards", per_shard=7)[0].parent, {}


class TestParquetSource(SourceContract):
    kind = "parquet"

    def write_source(self, tree: ImageTree, work: Path) -> tuple[Path, dict[str, Any]]:
        classes, rows = tree_rows(tree.root)
        write_tables(work / "tables", rows, files=2, classes=classes, row_group_size=7)
        return work / "tables", {}


class TestKeyedCSVPluginSource(SourceContract):
    kind = "keyedcsv"
    source_class = KeyedCSVSource

    def write_source(self, tree: ImageTree, work: Path) -> tuple[Path, dict[str, Any]]:
        path = work / "keyed.csv"
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["key", "class", "file"])
            writer.writerows((key, tree.classes[label], tree.root / key) for key, label in tree.files)
        return path, {}

# -- coverage --------------------------------------------------------------------------------

#: Built-ins no test here can reach, and why.
UNREACHABLE = {
    ("engine", "slurm"): "needs a Slurm cluster", ("engine", "pbs"): "needs a PBS cluster",
    ("store", "gs"): "needs a GCS emulator", ("store", "gcs"): "needs a GCS emulator",
    ("store", "abfs"): "the class of az:// (AzureStore), tested over az://",
    ("store", "https"): "the class of http:// (HTTPStore), tested over http://",
    ("source", "coco"): "fields without a class label, unlike the contract's tree: test_coco_source.py",
    ("source", "masks"): "fields without a class label, unlike the contract's tree: test_mask_source.py",
    ("source", "yolo"): "fields without a class label, unlike the contract's tree: test_yolo_source.py",
}


def _covered() -> set[tuple[str, str]]:
    covered = set()
    for cls in list(globals().values()):
        if not (isinstance(cls, type) and cls.__name__.startswith("Test")):
            continue
        if issubclass(cls, BackendContract):
            covered.add(("backend", cls.backend.name))
        elif issubclass(cls, CodecContract):
            covered.add(("codec", type(cls.codec).name))
        elif issubclass(cls, EngineContract):
            covered.add(("engine", cls.engine))
        elif issubclass(cls, SourceContract):
            covered.add(("source", cls.kind))
        elif issubclass(cls, StoreContract):
            covered.add(("store", STORE_SCHEMES[cls]))
    return covered


def test_every_built_in_and_a_plugin_of_each_kind_has_its_contract() -> None:
    registries = {"backend": BACKENDS, "codec": CODECS, "engine": ENGINES, "store": STORES, "source": SOURCES}
    built_in = {(kind, name) for kind, registry in registries.items() for name in registry.names()}
    missing = built_in - _covered() - set(UNREACHABLE)
    assert not missing, f"built-ins without a contract class here: {sorted(missing)}"
    plugins = _covered() - built_in
    assert {kind for kind, _ in plugins} == set(registries), f"plugins tested: {sorted(plugins)}"
    assert not plugins & built_in


# -- sources with fields ---------------------------------------------------------------------


class TestListFieldSource(FieldSourceContract):
    kind = "list"

    def write_source(self, tree: ImageTree, work: Path) -> tuple[Path, dict[str, Any]]:
        path = work / "list.csv"
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["path", "label", "caption", "number"])
            writer.writerows((relpath, tree.classes[label], *field_values(relpath).values())
                             for relpath, label in tree.files)
        return path, {"root": tree.root, "fields": ["caption:text", "number:int"]}


class TestWebDatasetFieldSource(FieldSourceContract):
    kind = "webdataset"

    def write_source(self, tree: ImageTree, work: Path) -> tuple[Path, dict[str, Any]]:
        """Shards of 7 samples: the image, a ``.txt`` caption and a ``.json`` of label and number."""
        folder = work / "shards"
        folder.mkdir()
        for start in range(0, len(tree.files), 7):
            with tarfile.open(folder / f"shard-{start // 7:06d}.tar", "w") as tar:
                for relpath, label in tree.files[start:start + 7]:
                    key, values = relpath.rsplit(".", 1)[0], field_values(relpath)
                    tar.add(tree.root / relpath, arcname=relpath, recursive=False)
                    add_member(tar, f"{key}.txt", values["caption"].encode("utf-8"))
                    add_member(tar, f"{key}.json", json.dumps(
                        {"label": tree.classes[label], "number": values["number"]}).encode("utf-8"))
        return folder, {"label_field": "json:label", "fields": ["caption=txt:text", "number=json#number:int"]}


class TestParquetFieldSource(FieldSourceContract):
    kind = "parquet"

    def write_source(self, tree: ImageTree, work: Path) -> tuple[Path, dict[str, Any]]:
        classes, rows = tree_rows(tree.root)
        rows = [Row(r.path, r.data, r.label, extra=field_values(str(r.path))) for r in rows]
        write_tables(work / "tables", rows, files=2, classes=classes, row_group_size=7)
        return work / "tables", {"fields": ["caption:text", "number:int"]}
