"""One generated tree, written as every kind of source, converts to the same dataset.

The tree (nested folders, unicode and spaces in names, five image formats, a broken file, a
dozen shards) is written as a tar, a gzip-compressed tar, a zip under a top folder, a tar of
per-class tars, a CSV list (with the tree, then with the tar, as its root), WebDataset shards
and Parquet files. Every conversion must give the tree's samples (path, class, target, bytes),
its skipped list and its shard files, byte for byte; ``verify --against`` the source it came
from passes, and ``info`` names its kind.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from imagetools import jpeg_bytes, png_bytes, standard_spec, write_tree
from parquet_tools import tree_rows, write_tables
from sourcekinds import write_tar, write_tar_of_tars, write_webdataset, write_zip

import packer
from packer.cli import cli
from packer.source.imagefolder import scan_imagefolder

SHARD_SIZE = "3KB"


def _tree(root: Path) -> Path:
    spec = dict(standard_spec())
    for i in range(24):
        name = f"{('cat', 'dog', 'éclair')[i % 3]}/m{i:03d}.{'jpg' if i % 4 else 'png'}"
        spec[name] = (jpeg_bytes if i % 4 else png_bytes)(12 + i % 5, 10 + i % 7, 100 + i)
    spec["dog/broken.jpg"] = b"\xff\xd8\xff\xe0 not really a jpeg"
    return write_tree(root, spec)


def _list(tree: Path, path: Path) -> Path:
    index = scan_imagefolder(tree)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "label"])
        for item in index.items:
            writer.writerow([item.relpath, index.classes[item.label]])
    return path


def _parquet(tree: Path, folder: Path) -> Path:
    classes, rows = tree_rows(tree)
    write_tables(folder, rows, files=2, classes=classes, row_group_size=7)
    return folder


#: Each kind of source: what to write (from the tree, into a work folder) and how to convert it.
KINDS: dict[str, tuple[Callable[[Path, Path], Path], dict[str, object]]] = {
    "tar": (lambda tree, work: write_tar(tree, work / "train.tar"), {}),
    "tar.gz": (lambda tree, work: write_tar(tree, work / "train.tar.gz", compress=True), {}),
    "zip, top folder": (lambda tree, work: write_zip(tree, work / "train.zip", top="train"), {}),
    "tar of class tars": (lambda tree, work: write_tar_of_tars(tree, work / "classes.tar"), {}),
    "list": (lambda tree, work: _list(tree, work / "list.csv"), {"root": "TREE"}),
    "list in a tar": (lambda tree, work: _list(tree, work / "list.csv"), {"root": "TAR"}),
    "webdataset": (lambda tree, work: write_webdataset(tree, work / "shards", per_shard=7)[0].parent,
                   {"label_field": "json:label"}),
    "webdataset, cls": (lambda tree, work: write_webdataset(tree, work / "shards", per_shard=7)[0].parent,
                        {}),
    "parquet": (lambda tree, work: _parquet(tree, work / "tables"), {}),
}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("kinds")
    tree = _tree(work / "tree")
    dst = work / "tree.packer"
    packer.convert(tree, dst, to="lmdb", shard_size=SHARD_SIZE, workers=1)
    return tree, dst


def _samples(dst: Path) -> tuple[object, ...]:
    ds = packer.open_dataset(dst, decode=False)
    manifest = ds.manifest
    return (ds.classes, ds.samples, [ds[i][0] for i in range(len(ds))],
            sorted((s.path, s.reason) for s in manifest.skipped),
            [(s.path, s.num_samples, s.sha256) for s in manifest.shards])


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_of_source_gives_the_tree_s_dataset(kind: str, reference: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    tree, expected = reference
    write, extra = KINDS[kind]
    src = write(tree, tmp_path)
    options = dict(extra)
    if options.get("root") == "TREE":
        options["root"] = tree
    elif options.get("root") == "TAR":
        options["root"] = write_tar(tree, tmp_path / "root.tar")
    dst = tmp_path / "dst"
    result = packer.convert(src, dst, to="lmdb", shard_size=SHARD_SIZE, workers=2, **options)
    got, want = _samples(dst), _samples(expected)
    if kind == "webdataset, cls":  # integer labels: the same targets, classes named by number
        assert got[0] == [str(i) for i in range(len(want[0]))]  # type: ignore[arg-type]
        got, want = got[1:], want[1:]
    assert got == want, kind
    assert len(result.manifest.shards) >= 4
    assert packer.verify_dataset(dst, against=src).samples_compared == result.manifest.num_samples
    verified = CliRunner().invoke(cli, ["verify", str(dst), "--against", str(src), "-q"])
    assert verified.exit_code == 0 and "samples compared byte for byte" in verified.output, verified.output
    info = CliRunner().invoke(cli, ["info", str(dst)])
    detected = result.manifest.extra["source"]["kind"]
    assert info.exit_code == 0 and f"({detected}" in info.output
    assert detected == {"tar": "archive", "tar.gz": "archive", "zip, top folder": "archive",
                        "tar of class tars": "archive", "list in a tar": "list",
                        "webdataset, cls": "webdataset"}.get(kind, kind)
