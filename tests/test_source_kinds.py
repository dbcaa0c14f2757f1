"""One generated tree, written as another kind of source, converts to the same dataset, and the
command line says which kind it was and verifies against it.

The tree (nested folders, unicode and spaces in names, five image formats, a broken file, a
dozen shards) is written as a CSV list whose root is a tar of the tree, and as Parquet files.
Every kind of source against one tree, through the library, is the source contract's
(tests/test_contracts.py, :mod:`packer.testing.sources`).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from click.testing import CliRunner
from imagetools import jpeg_bytes, png_bytes, standard_spec, write_tree
from parquet_tools import tree_rows, write_tables
from sourcekinds import write_tar

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


# Every kind, written from one tree, converts to the tree's dataset: the source contract
# (tests/test_contracts.py). Here, the command line's side of that, for a list file in a tar
# (two kinds in one) and Parquet.
@pytest.mark.parametrize("kind", ["list in a tar", "parquet"])
def test_the_command_line_names_the_kind_and_verifies_against_it(kind: str, reference: tuple[Path, Path],
                                                                 tmp_path: Path) -> None:
    tree, expected = reference
    if kind == "parquet":
        src, options = _parquet(tree, tmp_path / "tables"), {}
    else:
        src, options = _list(tree, tmp_path / "list.csv"), {"root": write_tar(tree, tmp_path / "root.tar")}
    dst = tmp_path / "dst"
    result = packer.convert(src, dst, to="lmdb", shard_size=SHARD_SIZE, workers=2, **options)
    assert _samples(dst) == _samples(expected)
    verified = CliRunner().invoke(cli, ["verify", str(dst), "--against", str(src), "-q"])
    assert verified.exit_code == 0 and "samples compared byte for byte" in verified.output, verified.output
    info = CliRunner().invoke(cli, ["info", str(dst)])
    detected = result.manifest.extra["source"]["kind"]
    assert detected == ("parquet" if kind == "parquet" else "list")
    assert info.exit_code == 0 and f"({detected}" in info.output
