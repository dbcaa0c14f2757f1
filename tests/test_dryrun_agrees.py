"""The dry run says the conversion would stop exactly when the real run stops (issue 26: it warned
of empty classes a list or a Parquet table declares, which the real run keeps, empty)."""

from __future__ import annotations

from pathlib import Path

import pytest
from imagetools import jpeg_bytes
from parquet_tools import Row, write_table

import packer
from packer.errors import PackerError


def _list_source(tmp: Path) -> tuple[Path, dict[str, object]]:
    for i in range(4):
        (tmp / "img").mkdir(parents=True, exist_ok=True)
        (tmp / "img" / f"{i}.jpg").write_bytes(jpeg_bytes(12, 12, i))
    listed = tmp / "list.txt"
    listed.write_text("".join(f"img/{i}.jpg {i % 2}\n" for i in range(4)))
    names = tmp / "classes.txt"
    names.write_text("cat\ndog\nemu\n")  # emu: declared, no image
    return listed, {"classes_file": str(names)}


def _parquet_source(tmp: Path) -> tuple[Path, dict[str, object]]:
    rows = [Row(f"{i}.jpg", jpeg_bytes(12, 12, i), i % 2) for i in range(4)]
    return write_table(tmp / "t.parquet", rows, classes=["cat", "dog", "emu"]), {}


def _tree_source(tmp: Path) -> tuple[Path, dict[str, object]]:
    for cls in ("cat", "dog"):
        (tmp / "tree" / cls).mkdir(parents=True)
        (tmp / "tree" / cls / "0.jpg").write_bytes(jpeg_bytes(12, 12, len(cls)))
    (tmp / "tree" / "emu").mkdir()  # a class folder without images: ImageFolder refuses it
    return tmp / "tree", {}


@pytest.mark.parametrize("make", [_list_source, _parquet_source, _tree_source],
                         ids=["list", "parquet", "tree"])
def test_the_dry_run_stops_exactly_when_the_run_does(make, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src, options = make(tmp_path / "src")
    plan = packer.plan_conversion(src, to="lmdb", **options)
    assert plan.empty_classes == ("emu",)
    try:
        packer.convert(src, tmp_path / "dst", to="lmdb", workers=1, **options)
        stopped = False
    except PackerError:
        stopped = True
    assert plan.would_fail_empty == stopped
    if not stopped:
        assert packer.open_dataset(tmp_path / "dst").classes == ["cat", "dog", "emu"]
