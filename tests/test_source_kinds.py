"""One generated tree, written as another kind of source: the command line says which kind it
was and verifies the conversion against it, byte for byte.

The tree (nested folders, unicode and spaces in names, five image formats, a broken file, a
dozen shards) is written as a CSV list whose root is a tar of the tree, and as Parquet files.
That every kind converts to the tree's dataset (samples, labels, bytes, shards, skipped files),
in spawned workers too, is the source contract's (tests/test_contracts.py,
:mod:`packer.testing.sources`).
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
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tree(tmp_path_factory.mktemp("kinds") / "tree")


# Every kind, written from one tree, converts to the tree's dataset: the source contract
# (tests/test_contracts.py). Here, the command line's side of that, for a list file in a tar
# (two kinds in one) and Parquet.
@pytest.mark.parametrize("kind", ["list in a tar", "parquet"])
def test_the_command_line_names_the_kind_and_verifies_against_it(kind: str, tree: Path,
                                                                 tmp_path: Path) -> None:
    if kind == "parquet":
        src, options = _parquet(tree, tmp_path / "tables"), {}
    else:
        src, options = _list(tree, tmp_path / "list.csv"), {"root": write_tar(tree, tmp_path / "root.tar")}
    dst = tmp_path / "dst"
    result = packer.convert(src, dst, to="lmdb", shard_size=SHARD_SIZE, workers=2, **options)
    assert result.manifest.num_samples == len(scan_imagefolder(tree).items) - 1  # all but the broken file
    verified = CliRunner().invoke(cli, ["verify", str(dst), "--against", str(src), "-q"])
    assert verified.exit_code == 0 and "samples compared byte for byte" in verified.output, verified.output
    info = CliRunner().invoke(cli, ["info", str(dst)])
    detected = result.manifest.extra["source"]["kind"]
    assert detected == ("parquet" if kind == "parquet" else "list")
    assert info.exit_code == 0 and f"({detected}" in info.output
