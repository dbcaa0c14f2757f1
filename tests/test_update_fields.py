"""``packer update`` on datasets with fields: a field value changed in the source (a caption in
a list file, a Parquet cell, a WebDataset member) rewrites the shards holding it, with or
without ``checksum``; an unchanged source reuses every shard. (Field values are in the records,
so they are a shard's inputs; an image and class dataset's inputs are the images alone.)"""

from __future__ import annotations

import csv
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

import packer

COUNT = 6


def _png(i: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.random.default_rng(i).integers(0, 256, (24, 24, 3), dtype=np.uint8)).save(out, "PNG")
    return out.getvalue()


def _list(root: Path, captions: list[str]) -> tuple[Path, dict[str, object]]:
    (root / "imgs").mkdir(parents=True, exist_ok=True)
    for i in range(COUNT):
        if not (root / "imgs" / f"{i}.png").exists():  # the images stay as they are: only captions change
            (root / "imgs" / f"{i}.png").write_bytes(_png(i))
    path = root / "list.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "label", "caption"])
        writer.writerows((f"imgs/{i}.png", "ab"[i % 2], caption) for i, caption in enumerate(captions))
    return path, {"fields": ["caption:text"]}


def _parquet(root: Path, captions: list[str]) -> tuple[Path, dict[str, object]]:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "train.parquet"
    pq.write_table(pa.table({"image": [_png(i) for i in range(COUNT)], "caption": captions}), path)
    return path, {"fields": ["caption:text"]}


def _webdataset(root: Path, captions: list[str]) -> tuple[Path, dict[str, object]]:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "shard-000000.tar"
    with tarfile.open(path, "w") as tar:
        for i, caption in enumerate(captions):
            members = ((f"s{i}.png", _png(i)), (f"s{i}.json", json.dumps({"caption": caption}).encode()))
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size, info.mtime = len(data), 1_700_000_000  # same mtimes: only the bytes change
                tar.addfile(info, io.BytesIO(data))
    return path, {"fields": ["caption=json#caption:text"]}


SOURCES: dict[str, Callable[[Path, list[str]], tuple[Path, dict[str, object]]]] = {
    "list": _list, "parquet": _parquet, "webdataset": _webdataset}


@pytest.mark.parametrize("checksum", [False, True], ids=["stat", "checksum"])
@pytest.mark.parametrize("kind", list(SOURCES))
def test_a_changed_field_value_rewrites_its_shard(tmp_path: Path, kind: str, checksum: bool) -> None:
    write = SOURCES[kind]
    captions = [f"caption {i}" for i in range(COUNT)]
    src, options = write(tmp_path / "src", captions)
    dst = tmp_path / "ds"
    packer.convert(src, dst, to="lmdb", workers=1, shard_size="4KB", **options)
    shards = len(packer.Manifest.load(dst).shards)
    assert shards > 1
    again = packer.update(src, dst, workers=1, checksum=checksum)
    assert again.shards_written == 0 and again.shards_reused == shards  # nothing changed

    captions[4] = "an edited caption \u2713"
    write(tmp_path / "src", captions)
    result = packer.update(src, dst, workers=1, checksum=checksum)
    assert result.shards_written == 1 and result.shards_reused == shards - 1
    dataset = packer.open_dataset(dst)
    assert [dataset[i]["caption"] for i in range(COUNT)] == captions
    report = packer.verify_dataset(dst, against=src)
    assert report.ok and report.samples_compared == COUNT, report.problems
