"""Parquet tables that name their images by path ({bytes: null, path}), as ``datasets``'
``to_parquet()`` writes a dataset built from files: read from the files on packer's key rules
(relative paths under root= or the table's folder, absolute ones only under root=), bounded by
max_bytes; every other row skipped with its reason; a conversion that packs nothing stops."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from click.testing import CliRunner
from imagetools import png_bytes
from parquet_tools import Row, write_table

import packer
from packer.cli import cli
from packer.errors import EmptySourceError, SourceError
from packer.source.base import SourceOptions
from packer.source.parquet.source import ParquetSource


def _images(folder: Path, count: int = 4) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"{i}.png"
        path.write_bytes(png_bytes(8, 8, seed=i))
        paths.append(path)
    return paths


def _rows(paths: list[str]) -> list[Row]:
    return [Row(path, None, i % 2) for i, path in enumerate(paths)]


def _payloads(dst: Path) -> list[bytes]:
    ds = packer.open_dataset(dst, decode=False)
    return [ds[i][0] for i in range(len(ds))]


def test_datasets_to_parquet_of_files_converts_with_root(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    files = _images(tmp_path / "imgs")
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])})
    table = datasets.Dataset.from_dict({"image": [str(p) for p in files], "label": [0, 1, 0, 1]},
                                       features=features)
    table.to_parquet(str(tmp_path / "t" / "train.parquet"))
    with pytest.raises(EmptySourceError, match=r"missing_image 4.*root="):
        packer.convert(tmp_path / "t" / "train.parquet", tmp_path / "no", to="lmdb", workers=1)
    assert not (tmp_path / "no" / "index.json").exists()
    result = packer.convert(tmp_path / "t" / "train.parquet", tmp_path / "dst", to="lmdb", workers=1,
                            root=tmp_path)
    assert result.manifest.num_samples == 4 and result.manifest.skipped == ()
    assert _payloads(tmp_path / "dst") == [p.read_bytes() for p in files]
    assert packer.open_dataset(tmp_path / "dst").targets == [0, 1, 0, 1]


def test_relative_paths_resolve_under_the_table_s_folder_or_root(tmp_path: Path) -> None:
    files = _images(tmp_path / "t" / "imgs")
    table = write_table(tmp_path / "t" / "train.parquet", _rows([f"imgs/{p.name}" for p in files]),
                        classes=["a", "b"])
    result = packer.convert(table, tmp_path / "dst", to="lmdb", workers=1)
    assert _payloads(tmp_path / "dst") == [p.read_bytes() for p in files]
    assert [key for key, _ in packer.open_dataset(tmp_path / "dst").samples] == [
        f"imgs/{p.name}" for p in files]
    assert result.manifest.skipped == ()
    # the paths as datasets kept them, relative to the folder the writer ran in
    moved = write_table(tmp_path / "u" / "train.parquet", _rows([f"t/imgs/{p.name}" for p in files]),
                        classes=["a", "b"])
    packer.convert(moved, tmp_path / "dst2", to="lmdb", workers=1, root=tmp_path)
    assert _payloads(tmp_path / "dst2") == [p.read_bytes() for p in files]


def test_bad_paths_are_skipped_with_reasons_and_never_opened(tmp_path: Path) -> None:
    files = _images(tmp_path / "root" / "imgs", 2)
    outside = _images(tmp_path / "outside", 1)[0]
    big = tmp_path / "root" / "big.png"
    big.write_bytes(png_bytes(64, 64) + b"\0" * 4096)
    rows = [Row(str(files[0]), None, 0), Row("imgs/1.png", None, 1), Row(str(outside), None, 0),
            Row("../outside/0.png", None, 1), Row("imgs/none.png", None, 0), Row("big.png", None, 1),
            Row("imgs", None, 0), Row(None, None, 1)]
    table = write_table(tmp_path / "root" / "t.parquet", rows, classes=["a", "b"])
    result = packer.convert(table, tmp_path / "dst", to="lmdb", workers=1, root=tmp_path / "root",
                            max_bytes=2048)
    assert result.manifest.num_samples == 2
    skipped = {s.path: (s.reason, s.detail) for s in result.manifest.skipped}
    reasons = sorted(reason for reason, _ in skipped.values())
    assert reasons == ["missing", "missing_image", "missing_image", "missing_image", "not_a_regular_file",
                       "too_large"]
    details = " ".join(detail for _, detail in skipped.values())
    assert f"{str(outside)!r} is not under root" in details
    assert "'../outside/0.png' has a '..' segment" in details
    assert "'imgs/none.png' names no file under root" in details


def test_absolute_paths_without_root_say_how_to_fix_it(tmp_path: Path) -> None:
    files = _images(tmp_path / "imgs", 2)
    table = write_table(tmp_path / "t.parquet", _rows([str(p) for p in files] + ["imgs/0.png"]),
                        classes=["a", "b"])
    result = packer.convert(table, tmp_path / "dst", to="lmdb", workers=1)
    assert result.manifest.num_samples == 1
    details = [s.detail for s in result.manifest.skipped]
    assert len(details) == 2 and all("is absolute: give root= the folder" in d for d in details)


def test_a_file_changed_after_the_scan_is_an_error_not_a_wrong_image(tmp_path: Path) -> None:
    files = _images(tmp_path / "imgs", 2)
    table = write_table(tmp_path / "t.parquet", _rows([f"imgs/{p.name}" for p in files]), classes=["a", "b"])
    source = ParquetSource(str(table), SourceOptions())
    items = source.scan().items
    reader = pickle.loads(pickle.dumps(source.reader()))
    assert reader.read(items[0]) == files[0].read_bytes()
    files[1].write_bytes(files[1].read_bytes() + b"more")
    with pytest.raises(SourceError, match="changed during the conversion"):
        reader.read(items[1])


def test_root_must_be_a_folder(tmp_path: Path) -> None:
    table = write_table(tmp_path / "t.parquet", _rows(["a.png"]), classes=["a", "b"])
    with pytest.raises(SourceError, match="root=.* is no folder"):
        packer.plan_conversion(table, to="lmdb", root=tmp_path / "nope")


def test_the_cli_exits_non_zero_and_the_dry_run_says_the_same(tmp_path: Path) -> None:
    _images(tmp_path / "elsewhere", 2)
    table = write_table(tmp_path / "t" / "t.parquet", _rows(["elsewhere/0.png", "elsewhere/1.png"]),
                        classes=["a", "b"])
    runner = CliRunner()
    dry = runner.invoke(cli, ["convert", str(table), str(tmp_path / "dst"), "--to", "lmdb", "--dry-run"])
    assert dry.exit_code == 0
    assert "WARNING: the conversion would stop: every one of the 2 rows" in dry.stdout
    assert "give --root the folder" in dry.stdout and "root=" not in dry.stdout  # the CLI's terms
    run = runner.invoke(cli, ["convert", str(table), str(tmp_path / "dst"), "--to", "lmdb", "-q"])
    assert run.exit_code == 1
    assert "The conversion stops: every one of the 2 rows" in run.stderr
    assert "(missing 2)" in run.stderr and "--root" in run.stderr
    assert not os.path.exists(tmp_path / "dst")
    ok = runner.invoke(cli, ["convert", str(table), str(tmp_path / "dst"), "--to", "lmdb", "-q",
                             "--root", str(tmp_path)])
    assert ok.exit_code == 0, ok.output
    assert len(packer.open_dataset(tmp_path / "dst")) == 2
