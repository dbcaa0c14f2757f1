"""An archive's index kept beside the plan (issue 28 item 4): array tasks and resumes reuse it
instead of indexing the archive again; a kept index of another version of the archive, or one
that is damaged or crafted, is ignored; a complete dataset keeps none."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from imagetools import dataset_snapshot
from sourcekinds import write_tar, write_tar_of_tars, write_zip

import packer
from packer.conversion.destination.state import SCANS_DIR
from packer.source.archive import source as archive_source
from packer.source.archive.listings import load_listing, save_listing
from packer.source.archive.source import index_archive
from packer.testing.trees import image_tree

OPTIONS: dict[str, Any] = {"to": "lmdb", "shard_size": "1500"}


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every archive the conversions in this process index."""
    seen: list[str] = []
    real = archive_source.index_archive

    def counting(path: str, **kwargs: Any) -> Any:
        seen.append(path)
        return real(path, **kwargs)

    monkeypatch.setattr(archive_source, "index_archive", counting)
    return seen


@pytest.mark.parametrize("kind", ["tar", "class tars", "zip", "tar.gz"])
def test_array_tasks_index_the_archive_once_and_give_the_single_runs_dataset(
        kind: str, tmp_path: Path, counted: list[str]) -> None:
    image_tree(tmp_path / "tree", 24)
    archive = {"tar": lambda: write_tar(tmp_path / "tree", tmp_path / "a.tar", top="train"),
               "class tars": lambda: write_tar_of_tars(tmp_path / "tree", tmp_path / "a.tar"),
               "zip": lambda: write_zip(tmp_path / "tree", tmp_path / "a.zip", top="train"),
               "tar.gz": lambda: write_tar(tmp_path / "tree", tmp_path / "a.tar.gz", top="train",
                                           compress=True)}[kind]()
    dst = tmp_path / "tasks"
    for task in range(3):
        packer.convert_task(archive, dst, task_id=task, num_tasks=3, **OPTIONS)
        assert list((dst / SCANS_DIR).glob("listing-*.json.gz"))
    assert counted == [str(archive)]  # the first task indexed it; the others read its index
    packer.merge(dst)
    assert not (dst / SCANS_DIR).exists()  # a complete dataset keeps no scan
    packer.convert(archive, tmp_path / "single", **OPTIONS)
    assert not (tmp_path / "single" / SCANS_DIR).exists()
    assert dataset_snapshot(dst) == dataset_snapshot(tmp_path / "single")


def test_a_kept_index_of_another_version_of_the_archive_is_not_used(tmp_path: Path,
                                                                    counted: list[str]) -> None:
    image_tree(tmp_path / "tree", 12)
    archive = write_tar(tmp_path / "tree", tmp_path / "a.tar", top="train")
    dst = tmp_path / "tasks"
    packer.convert_task(archive, dst, task_id=0, num_tasks=2, **OPTIONS)
    image_tree(tmp_path / "tree", 15)  # the archive is made again, with more images
    write_tar(tmp_path / "tree", archive, top="train")
    with pytest.raises(packer.ResumeError):  # another source than the plan's: refused, as before
        packer.convert_task(archive, dst, task_id=1, num_tasks=2, **OPTIONS)
    assert counted == [str(archive)] * 2  # indexed again, not taken from the kept index


@pytest.mark.parametrize("damage", ["a name with ..", "an absolute name", "past the end", "garbage",
                                    "another version"])
def test_a_damaged_or_crafted_kept_index_is_ignored(damage: str, tmp_path: Path) -> None:
    image_tree(tmp_path / "tree", 6, broken=False)
    archive = str(write_tar(tmp_path / "tree", tmp_path / "a.tar", top="train"))
    listing, _ = index_archive(archive)
    folder = str(tmp_path / "scans")
    save_listing(folder, listing)
    assert load_listing(folder, archive, listing.size, listing.mtime_ns) == listing
    (kept,) = Path(folder).iterdir()
    record = json.loads(gzip.decompress(kept.read_bytes()))
    first = next(row for row in record["members"] if row[1] == "file")
    if damage == "a name with ..":
        first[0] = "train/../../../etc/passwd"
    elif damage == "an absolute name":
        first[0] = "/etc/passwd"
    elif damage == "past the end":
        first[2] = listing.size
    elif damage == "another version":
        record["version"] = 99
    data = b"\x1f\x8b not gzip" if damage == "garbage" else gzip.compress(json.dumps(record).encode())
    kept.write_bytes(data)
    assert load_listing(folder, archive, listing.size, listing.mtime_ns) is None
