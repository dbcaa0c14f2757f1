"""``export_webdataset`` / ``packer export --as-webdataset``: a dataset with fields written back as
WebDataset shards, every field a member, read by ``webdataset`` itself; a WebDataset converted
with ``fields=`` comes back under its own extensions, so converting the export again gives the
same samples."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import packer
from packer.cli import cli
from packer.errors import OutputExistsError

wds = pytest.importorskip("webdataset")

SCHEMA: list[dict[str, Any]] = [
    {"name": "image", "type": "image"},
    {"name": "mask", "type": "mask", "params": {"image": "image", "classes": ["bg", "cat"]}},
    {"name": "boxes", "type": "boxes", "params": {"image": "image", "format": "xywh"}},
    {"name": "box_labels", "type": "box_labels", "params": {"boxes": "boxes", "classes": ["cat", "dog"]}},
    {"name": "caption", "type": "text"},
    {"name": "score", "type": "float"},
    {"name": "label", "type": "label", "params": {"classes": ["indoor", "outdoor"]}},
]


def _png(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array).save(out, "PNG")
    return out.getvalue()


def _sample(i: int) -> dict[str, Any]:
    rng = np.random.default_rng(i)
    boxes = np.array([[j, j + 1, 5.5, 4.25] for j in range(i % 3)], np.float32).reshape(-1, 4)
    return {"__key__": f"img/{i:03d}", "image": rng.integers(0, 256, (12, 16, 3), dtype=np.uint8),
            "mask": rng.integers(0, 2, (12, 16), dtype=np.uint8), "boxes": boxes,
            "box_labels": [j % 2 for j in range(i % 3)], "caption": f"sample {i} \u00e9", "score": i / 4,
            "label": i % 2}


def _members(shards: Path) -> list[dict[str, Any]]:
    return list(wds.WebDataset(sorted(str(p) for p in shards.glob("*.tar")), shardshuffle=False))


def test_every_field_is_a_member_webdataset_reads(tmp_path: Path) -> None:
    samples = [_sample(i) for i in range(7)]
    packer.write(tmp_path / "ds", samples, SCHEMA, to="lmdb", workers=1)
    result = packer.export_webdataset(tmp_path / "ds", tmp_path / "out", samples_per_shard=3)
    assert result.shards == ("shard-000000.tar", "shard-000001.tar", "shard-000002.tar")
    assert (tmp_path / "out" / "classes.txt").read_text() == "indoor\noutdoor\n"
    got = _members(tmp_path / "out")
    assert [g["__key__"] for g in got] == [s["__key__"] for s in samples]
    for member, sample in zip(got, samples, strict=True):
        assert set(member) - {"__key__", "__url__", "__local_path__"} == {
            "png", "mask.png", "boxes.json", "box_labels.json", "caption.txt", "score.txt", "cls"}
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(member["png"]))), sample["image"])
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(member["mask.png"]))), sample["mask"])
        assert json.loads(member["boxes.json"]) == sample["boxes"].tolist()
        assert json.loads(member["box_labels.json"]) == sample["box_labels"]
        assert member["caption.txt"].decode() == sample["caption"]
        assert float(member["score.txt"]) == sample["score"] and int(member["cls"]) == sample["label"]
    assert "caption=caption.txt:text" in result.fields and "boxes=boxes.json:boxes.xywh" in result.fields
    back = packer.convert(tmp_path / "out", tmp_path / "back", to="lmdb", workers=1,  # shards and classes.txt
                          fields=list(result.fields), classes_file=result.classes_file).manifest
    assert back.classes == ("indoor", "outdoor") and back.num_samples == len(samples)
    dataset = packer.open_dataset(tmp_path / "back")
    assert [dataset[i]["caption"] for i in range(len(samples))] == [s["caption"] for s in samples]
    for i, sample in enumerate(samples):  # boxes come back as boxes, exactly
        assert np.array_equal(dataset[i]["boxes"], sample["boxes"])
        assert dataset[i]["box_labels"].tolist() == sample["box_labels"]


def test_a_webdataset_with_fields_round_trips(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    source = tmp_path / "wds"
    source.mkdir()
    with wds.ShardWriter(str(source / "train-%06d.tar"), maxcount=4, verbose=0) as sink:
        for i in range(9):
            image = rng.integers(0, 256, (10, 14, 3), dtype=np.uint8)
            sink.write({"__key__": f"s{i:03d}", "jpg": _png(image),
                        "seg.png": _png(rng.integers(0, 4, (10, 14), dtype=np.uint8)), "txt": f"caption {i}",
                        "cls": i % 3})
    fields = ["mask=seg.png:mask", "caption=txt:text"]
    packer.convert(source, tmp_path / "ds", to="lmdb", workers=1, fields=fields)
    result = packer.export_webdataset(tmp_path / "ds", tmp_path / "out")
    assert result.fields == tuple(fields) and result.members["mask"] == "seg.png"
    packer.convert(tmp_path / "out", tmp_path / "again", to="lmdb", workers=1, fields=list(result.fields),
                   classes_file=result.classes_file)
    first = packer.open_dataset(tmp_path / "ds", decode={"image": False})
    again = packer.open_dataset(tmp_path / "again", decode={"image": False})
    assert len(first) == len(again) == 9
    for i in range(9):
        a, b = first[i], again[i]
        assert bytes(a["image"]) == bytes(b["image"]) and a["caption"] == b["caption"]
        assert np.array_equal(a["mask"], b["mask"]) and a["label"] == b["label"]
    assert packer.verify_dataset(tmp_path / "ds", against=tmp_path / "out").ok  # the export is the source


def test_the_export_is_deterministic_and_never_overwrites_unasked(tmp_path: Path) -> None:
    packer.write(tmp_path / "ds", [_sample(i) for i in range(4)], SCHEMA, to="hdf5", workers=1)
    packer.export_webdataset(tmp_path / "ds", tmp_path / "one")
    packer.export_webdataset(tmp_path / "ds", tmp_path / "two")
    shard = "shard-000000.tar"
    assert (tmp_path / "one" / shard).read_bytes() == (tmp_path / "two" / shard).read_bytes()
    with pytest.raises(OutputExistsError):
        packer.export_webdataset(tmp_path / "ds", tmp_path / "one")
    packer.export_webdataset(tmp_path / "ds", tmp_path / "one", overwrite=True)


def test_the_command_line_says_how_to_convert_it_back(tmp_path: Path) -> None:
    packer.write(tmp_path / "ds", [_sample(i) for i in range(3)], SCHEMA, to="lmdb", workers=1)
    tree = CliRunner().invoke(cli, ["export", str(tmp_path / "ds"), str(tmp_path / "tree")])
    assert tree.exit_code != 0 and "--as-webdataset" in tree.output
    done = CliRunner().invoke(cli, ["export", str(tmp_path / "ds"), str(tmp_path / "out"), "--as-webdataset",
                                    "--shard-samples", "2"])
    assert done.exit_code == 0, done.output
    assert "Exported 3 samples as 2 WebDataset shard(s)" in done.output
    assert "--field mask=mask.png:mask" in done.output and "--field caption=caption.txt:text" in done.output
