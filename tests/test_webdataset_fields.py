"""WebDataset samples with several members (image, mask PNG, JSON, caption, cls) as typed fields
(``fields=`` / ``--field``), on shards written by ``webdataset``'s own ``ShardWriter`` and read
back field for field against what ``webdataset`` itself decodes."""

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
from packer.errors import SourceError

wds = pytest.importorskip("webdataset")

FIELDS = ["mask=seg.png:mask", "caption=txt:text", "json:json", "score=score.txt:float"]


def _png(array: np.ndarray, kind: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.fromarray(array).save(out, kind)
    return out.getvalue()


def _sample(i: int, rng: np.random.Generator, *, size: tuple[int, int] = (24, 32)) -> dict[str, Any]:
    image = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
    mask = rng.integers(0, 5, size, np.uint8)
    return {"__key__": f"img/{i:04d}", "jpg": _png(image, "JPEG"), "seg.png": _png(mask),
            "txt": f"a photo, number {i} \u00e9", "json": {"id": i, "boxes": [[1, 2, 3, 4]] * (i % 3)},
            "score.txt": f"{i / 4}", "cls": i % 3}


def _write(folder: Path, samples: list[dict[str, Any]], per_shard: int = 4) -> Path:
    folder.mkdir(parents=True)
    with wds.ShardWriter(str(folder / "train-%06d.tar"), maxcount=per_shard, verbose=0) as sink:
        for sample in samples:
            sink.write(sample)
    return folder


def _samples(count: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(7)
    return [_sample(i, rng) for i in range(count)]


@pytest.mark.parametrize("backend", ["lmdb", "hdf5"])
def test_members_read_back_field_for_field(tmp_path: Path, backend: str) -> None:
    shards = _write(tmp_path / "wds", _samples(10))
    manifest = packer.convert(shards, tmp_path / "ds", to=backend, workers=1, fields=FIELDS).manifest
    assert [(f.name, f.type) for f in manifest.schema] == [
        ("image", "image"), ("label", "label"), ("mask", "mask"), ("caption", "text"), ("json", "json"),
        ("score", "float")]
    assert manifest.num_samples == 10 and not manifest.skipped and manifest.classes == ("0", "1", "2")
    ours = packer.open_dataset(tmp_path / "ds", decode={"image": False})
    theirs = list(wds.WebDataset(sorted(str(p) for p in shards.glob("*.tar")), shardshuffle=False)
                  .decode("rgb8"))
    assert len(theirs) == len(ours)
    for got, want in zip((ours[i] for i in range(len(ours))), theirs, strict=True):
        assert got["label"] == want["cls"]
        assert np.array_equal(got["mask"], want["seg.png"][..., 0])  # webdataset gives it as RGB
        assert got["caption"] == want["txt"] and got["json"] == want["json"]
        assert got["score"] == float(want["score.txt"])
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(bytes(got["image"])))), want["jpg"])
    assert manifest.extra["options"]["source"]["fields"] == FIELDS
    assert packer.update(shards, tmp_path / "ds", workers=1).up_to_date  # the fields are recorded


def test_samples_without_a_class_have_no_label_field(tmp_path: Path) -> None:
    samples = [{k: v for k, v in s.items() if k not in ("cls", "seg.png")} for s in _samples(5)]
    shards = _write(tmp_path / "wds", samples)
    manifest = packer.convert(shards, tmp_path / "ds", to="lmdb", workers=1,
                              fields=["caption=txt:text"]).manifest
    assert [f.name for f in manifest.schema] == ["image", "caption"] and manifest.num_samples == 5
    dataset = packer.open_dataset(tmp_path / "ds", fields=("caption",))
    assert [dataset[i]["caption"] for i in range(5)] == [s["txt"] for s in samples]
    with pytest.raises(SourceError, match="no sample has a usable label"):  # asked for, so required
        packer.convert(shards, tmp_path / "ds2", to="lmdb", label_field="cls", fields=["caption=txt:text"])


def test_a_member_named_by_a_field_is_never_the_image(tmp_path: Path) -> None:
    samples = [{"__key__": s["__key__"], "png": s["seg.png"], "jpg": s["jpg"], "cls": s["cls"]}
               for s in _samples(3)]
    shards = _write(tmp_path / "wds", samples)
    packer.convert(shards, tmp_path / "ds", to="lmdb", workers=1, fields=["mask=png:mask"])
    dataset = packer.open_dataset(tmp_path / "ds", decode={"image": False})
    for i, sample in enumerate(samples):
        assert bytes(dataset[i]["image"]) == sample["jpg"]
        assert np.array_equal(dataset[i]["mask"], np.asarray(Image.open(io.BytesIO(sample["png"]))))


def test_bad_members_are_skipped_with_their_reasons_and_the_counts_add_up(tmp_path: Path) -> None:
    samples = _samples(6)
    del samples[1]["seg.png"]  # no mask: missing_member
    samples[2]["score.txt"] = "high"  # not a number: invalid_value
    samples[3]["seg.png"] = _png(np.zeros((5, 5), np.uint8))  # another size than its image
    samples[4]["txt"] = b"\xff\xfe not utf-8"
    shards = _write(tmp_path / "wds", samples)
    plan = packer.plan_conversion(shards, to="lmdb", fields=FIELDS)
    assert any("1 sample(s) lack a member a field names (seg.png 1)" in n for n in plan.report.notes)
    assert plan.known_skips == {"missing_member": 1}
    manifest = packer.convert(shards, tmp_path / "ds", to="lmdb", workers=1, fields=FIELDS).manifest
    skipped = {s.path: (s.reason, s.detail) for s in manifest.skipped}
    assert {path: reason for path, (reason, _) in skipped.items()} == {
        "img/0001.jpg": "missing_member", "img/0002.jpg": "invalid_value", "img/0003.jpg": "mask_size",
        "img/0004.jpg": "invalid_value"}
    assert "'score.txt' member (float)" in skipped["img/0002.jpg"][1]
    assert "'txt' member (text)" in skipped["img/0004.jpg"][1]
    assert manifest.num_samples + len(manifest.skipped) == len(samples)


def test_members_that_are_no_field_are_named_in_a_note(tmp_path: Path) -> None:
    shards = _write(tmp_path / "wds", _samples(4))
    plan = packer.plan_conversion(shards, to="lmdb", fields=["caption=txt:text"])
    assert any("no field were not kept (json 4, score.txt 4, seg.png 4)" in n for n in plan.report.notes)


def test_bad_field_specs_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    shards = _write(tmp_path / "wds", _samples(2))
    dst = tmp_path / "ds"
    cases = {"seg.png": r"give \[NAME=\]EXTENSION:TYPE", "seg.png:polygon": "TYPE one of text, int",
             "label=cls:int": "taken by the source's own label", "9=txt:text": "'9' is no field name"}
    for spec, message in cases.items():
        with pytest.raises(SourceError, match=message):
            packer.convert(shards, dst, to="lmdb", fields=[spec])
        assert not dst.exists()


def test_the_command_line_prints_the_schema_and_converts(tmp_path: Path) -> None:
    shards = _write(tmp_path / "wds", _samples(4))
    args = ["convert", str(shards), str(tmp_path / "ds"), "--to", "lmdb", "--field", "mask=seg.png:mask",
            "--field", "caption=txt:text"]
    plan = CliRunner().invoke(cli, [*args, "--dry-run"])
    assert plan.exit_code == 0, plan.output
    schema = "fields: image (image, original), label (label, 3 classes), mask (mask), caption (text)"
    assert schema in plan.output
    assert "--field" in plan.output and "fields=" not in plan.output  # the note speaks the CLI's words
    done = CliRunner().invoke(cli, [*args, "--workers", "1"])
    assert done.exit_code == 0, done.output
    info = CliRunner().invoke(cli, ["info", str(tmp_path / "ds"), "--json"])
    assert [f["name"] for f in json.loads(info.output)["fields"]] == ["image", "label", "mask", "caption"]


def test_boxes_come_from_a_json_member_by_path(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    samples = []
    for i in range(5):
        objects = [{"bbox": [1.0 + k, 2.0, 6.5, 4.25], "label": (i + k) % 3} for k in range(i % 3)]
        image = _png(rng.integers(0, 256, (24, 32, 3), np.uint8), "JPEG")
        samples.append({"__key__": f"d/{i:03d}", "jpg": image, "json": {"objects": objects, "id": i}})
    shards = _write(tmp_path / "wds", samples)
    specs = ["boxes=json#objects.bbox:boxes.xywh", "box_labels=json#objects.label:box_labels",
             "ident=json#id:int"]
    manifest = packer.convert(shards, tmp_path / "ds", to="lmdb", workers=1, fields=specs).manifest
    assert [(f.name, f.type) for f in manifest.schema] == [
        ("image", "image"), ("boxes", "boxes"), ("box_labels", "box_labels"), ("ident", "int")]
    assert manifest.schema["boxes"].params["format"] == "xywh" and not manifest.skipped
    dataset = packer.open_dataset(tmp_path / "ds", fields=("boxes", "box_labels", "ident"))
    for i, sample in enumerate(samples):
        objects = sample["json"]["objects"]
        assert dataset[i]["boxes"].reshape(-1, 4).tolist() == [o["bbox"] for o in objects]
        assert dataset[i]["box_labels"].tolist() == [o["label"] for o in objects] and dataset[i]["ident"] == i
    with pytest.raises(SourceError, match="box_labels need the boxes"):
        packer.convert(shards, tmp_path / "x", to="lmdb", fields=["box_labels=json#objects.label:box_labels"])
