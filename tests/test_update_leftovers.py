"""An update killed after switching index.json, before tidying, leaves its marker, staging and
receipts beside a dataset that is already the new version; the next update (up to date) removes
them (CI caught it: test_update_safety's random kill landed in that window)."""

from __future__ import annotations

import shutil
from pathlib import Path

from imagetools import jpeg_bytes, write_tree

import packer
from packer.conversion.destination.state import TMP_DIR, UPDATE_NAME
from packer.conversion.receipts import RECEIPTS_DIR
from packer.testing.snapshots import dataset_snapshot


def test_an_up_to_date_update_removes_what_a_killed_update_left(tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", {f"{c}/{i}.jpg": jpeg_bytes(12, 10, n * 10 + i)
                                        for n, c in enumerate(("ant", "bee")) for i in range(3)})
    dst = tmp_path / "dst"
    packer.convert(src, dst, to="lmdb", workers=1)
    (src / "bee" / "new.jpg").write_bytes(jpeg_bytes(12, 10, 99))
    assert packer.update(src, dst, workers=1).version == 2
    clean = tmp_path / "clean"
    shutil.copytree(dst, clean)
    # what the killed run's switch left: its marker, a staging folder and a receipt
    (dst / UPDATE_NAME).write_text('{"from_version": 1}\n')
    (dst / TMP_DIR).mkdir()
    (dst / RECEIPTS_DIR).mkdir()
    (dst / RECEIPTS_DIR / ("0" * 64 + ".json")).write_text("{}\n")
    result = packer.update(src, dst, workers=1)
    assert result.up_to_date and result.version == 2
    for leftover in (UPDATE_NAME, TMP_DIR, RECEIPTS_DIR):
        assert not (dst / leftover).exists(), leftover
    assert dataset_snapshot(dst) == dataset_snapshot(clean)
    assert packer.verify_dataset(dst).ok


def test_a_dry_run_touches_nothing(tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", {f"c/{i}.jpg": jpeg_bytes(12, 10, i) for i in range(2)})
    dst = tmp_path / "dst"
    packer.convert(src, dst, to="hdf5", workers=1)
    (dst / RECEIPTS_DIR).mkdir()
    assert packer.update(src, dst, dry_run=True).up_to_date
    assert (dst / RECEIPTS_DIR).exists()  # a dry run takes no lease, so it removes nothing
