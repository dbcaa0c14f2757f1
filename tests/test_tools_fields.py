"""The tools on a dataset with fields: info prints the schema, verify --deep decodes every field,
show describes each field, preview draws the images; export as a tree and bench refuse plainly (they
handle images and classes only) instead of treating a record as an image file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import packer
from packer.cli import cli
from packer.errors import DatasetError
from packer.tools.preview.sheet import NO_CLASS_ROW, make_contact_sheet
from packer.tools.show import sample_bytes, sample_info, save_sample

SCHEMA: list[dict[str, Any]] = [
    {"name": "image", "type": "image"},
    {"name": "mask", "type": "mask", "params": {"image": "image", "classes": ["bg", "fg"]}},
    {"name": "boxes", "type": "boxes", "params": {"image": "image"}},
    {"name": "caption", "type": "text"},
    {"name": "label", "type": "label", "params": {"classes": ["a", "b"]}},
]


def _sample(i: int) -> dict[str, Any]:
    image = np.full((20, 30, 3), i * 10, np.uint8)
    mask = np.zeros((20, 30), np.uint8)
    mask[:, : i + 1] = 1
    return {"__key__": f"s/{i}", "image": image, "mask": mask, "caption": f"caption {i}",
            "boxes": np.array([[1, 2, 11, 12.5]] * (i % 3), np.float32).reshape(-1, 4), "label": i % 2}


@pytest.fixture
def fields_dataset(tmp_path: Path) -> Path:
    packer.write(tmp_path / "ds", [_sample(i) for i in range(6)], SCHEMA, to="lmdb")
    return tmp_path / "ds"


def test_info_lists_the_fields(fields_dataset: Path) -> None:
    info = packer.dataset_info(fields_dataset)
    assert [f["name"] for f in info.fields] == ["image", "mask", "boxes", "caption", "label"]
    assert info.to_dict()["fields"][1]["params"]["classes"] == ["bg", "fg"]
    out = CliRunner().invoke(cli, ["info", str(fields_dataset)])
    assert out.exit_code == 0, out.output
    schema_lines = r"^fields:\n  image +image\n  mask +mask \(.*image=\"image\".*2 classes\)$"
    assert re.search(schema_lines, out.output, re.M)
    converted_info = packer.dataset_info(fields_dataset).to_dict()
    assert json.loads(json.dumps(converted_info))["fields"] == [dict(f) for f in info.fields]


def test_verify_deep_decodes_every_field(fields_dataset: Path) -> None:
    report = packer.verify_dataset(fields_dataset, deep=True)
    assert report.ok and report.samples_checked == 6


def test_verify_deep_finds_a_record_that_does_not_hold_its_fields(tmp_path: Path) -> None:
    """A record of another schema (one payload, not a PKR1 record of five) is a decode error,
    even though its shard's checksum (recomputed by the crafter) matches."""
    import hashlib

    from packer.format.manifest import Manifest
    from packer.store import open_store
    src = tmp_path / "one"
    packer.write(src, [{"image": np.zeros((4, 4, 3), np.uint8)}], [{"name": "image", "type": "image"}],
                 to="lmdb")
    dst = tmp_path / "ds"
    packer.write(dst, [_sample(0)], SCHEMA, to="lmdb")
    store = open_store(str(dst))
    manifest = Manifest.load(store)
    data = json.loads((dst / "index.json").read_text())
    donor = json.loads((src / "index.json").read_text())
    shard = donor["shards"][0]
    (dst / shard["path"]).write_bytes((src / shard["path"]).read_bytes())
    data["shards"] = [{**data["shards"][0], **{k: shard[k] for k in ("path", "num_bytes", "sha256")}}]
    assert hashlib.sha256((dst / shard["path"]).read_bytes()).hexdigest() == shard["sha256"]
    (dst / "index.json").write_text(json.dumps(data, indent=2, sort_keys=True))
    assert manifest.num_samples == 1
    report = packer.verify_dataset(dst, deep=True)
    assert not report.ok
    assert [p.kind for p in report.problems] == ["decode_error"]


def test_show_describes_each_field_and_saves_the_image(fields_dataset: Path, tmp_path: Path) -> None:
    info = sample_info(fields_dataset, 2)
    assert info.relpath == "s/2" and info.class_name == "a" and (info.width, info.height) == (30, 20)
    assert info.fields["mask"] == "mask: 30x20 uint8, values [0, 1]"
    assert info.fields["boxes"] == "boxes: 2 box(es), xyxy: [1.0, 2.0, 11.0, 12.5]; [1.0, 2.0, 11.0, 12.5]"
    assert info.fields["caption"] == "text: 'caption 2'"
    image = packer.open_dataset(fields_dataset, decode={"image": False})[2]["image"]
    assert sample_bytes(fields_dataset, 2) == image
    save_sample(fields_dataset, 2, tmp_path / "two.png")
    assert (tmp_path / "two.png").read_bytes() == image
    out = CliRunner().invoke(cli, ["show", str(fields_dataset), "2"])
    assert out.exit_code == 0, out.output
    assert re.search(r"^fields:$", out.output, re.M) and "  caption  text: 'caption 2'" in out.output


def test_preview_draws_the_images_and_one_row_without_classes(fields_dataset: Path, tmp_path: Path) -> None:
    sheet = make_contact_sheet(fields_dataset, per_class=4, thumb=32)
    assert not sheet.failed and len(sheet.cells) == 6
    schema = [{"name": "image", "type": "image"}, {"name": "caption", "type": "text"}]
    packer.write(tmp_path / "plain", [{"image": np.zeros((8, 8, 3), np.uint8), "caption": "x"}] * 1
                 + [{"image": np.ones((8, 8, 3), np.uint8), "caption": "y"}], schema, to="hdf5")
    plain = make_contact_sheet(tmp_path / "plain", thumb=32)
    assert [row.class_name for row in plain.rows] == [NO_CLASS_ROW] and len(plain.cells) == 2
    assert not plain.failed
    show = sample_info(tmp_path / "plain", 1)
    assert show.class_name == "" and show.target == -1
    assert packer.verify_dataset(tmp_path / "plain", deep=True).ok


def test_export_and_bench_refuse_a_dataset_with_fields(fields_dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"mask.*WebDataset shards with export_webdataset\(\)"):
        packer.export_dataset(fields_dataset, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    with pytest.raises(DatasetError, match="packer bench"):
        packer.bench(fields_dataset, workers=0, repeats=1)


def test_field_statistics_count_what_the_records_hold(fields_dataset: Path) -> None:
    stats = packer.field_statistics(fields_dataset)
    assert list(stats) == ["mask", "boxes", "caption", "label"]  # schema order, images left out
    assert stats["boxes"] == {"type": "boxes", "samples": 6, "boxes": 6, "without_boxes": 2,
                              "per_sample": {"min": 0.0, "mean": 1.0, "max": 2.0}}
    assert stats["mask"]["samples_with_value"] == {"bg": 6, "fg": 6}
    assert stats["caption"]["length"] == {"min": 9.0, "mean": 9.0, "max": 9.0}
    assert stats["label"]["counts"] == {"a": 3, "b": 3}
    spread = packer.field_statistics(fields_dataset, limit=2)  # samples 0 and 5: 0 and 2 boxes
    assert spread["boxes"]["samples"] == 2 and spread["boxes"]["boxes"] == 2
    assert spread["label"]["counts"] == {"a": 1, "b": 1}
    with pytest.raises(ValueError, match="limit must be positive"):
        packer.field_statistics(fields_dataset, limit=0)


def test_info_prints_field_statistics_on_request(fields_dataset: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(cli, ["info", str(fields_dataset), "--field-stats"])
    assert out.exit_code == 0, out.output
    assert "field statistics (6 samples read):" in out.output
    assert re.search(r"^  boxes +boxes: 6 boxes, per sample min 0, mean 1, max 2, 2 sample\(s\) without$",
                     out.output, re.M)
    assert re.search(r"^  mask +mask: samples holding each value: bg 6, fg 6$", out.output, re.M)
    assert "field statistics" not in runner.invoke(cli, ["info", str(fields_dataset)]).output
    as_json = runner.invoke(cli, ["info", str(fields_dataset), "--field-stats", "--limit", "2", "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.output)["field_stats"]["boxes"]["samples"] == 2
    alone = runner.invoke(cli, ["info", str(fields_dataset), "--limit", "2"])
    assert alone.exit_code == 2 and "--limit needs --field-stats" in alone.output


def test_field_statistics_of_an_imagefolder_dataset_are_its_label_counts(packed_once: Path) -> None:
    manifest = packer.Manifest.load(packer.open_store(packed_once))
    stats = packer.field_statistics(packed_once)
    assert stats == {"label": {"type": "label", "samples": manifest.num_samples,
                               "counts": dict(zip(manifest.classes, manifest.class_counts, strict=True))}}


def test_field_statistics_name_the_classes_never_seen(tmp_path: Path) -> None:
    schema = [{"name": "image", "type": "image"},
              {"name": "mask", "type": "mask", "params": {"image": "image", "classes": ["bg", "a", "b"]}},
              {"name": "tags", "type": "labels", "params": {"classes": ["x", "y"]}}]
    samples = [{"image": np.zeros((4, 4, 3), np.uint8), "mask": np.full((4, 4), 2, np.uint8),
                "tags": [1]} for _ in range(2)]
    packer.write(tmp_path / "ds", samples, schema, to="lmdb")
    stats = packer.field_statistics(tmp_path / "ds")
    assert stats["mask"]["samples_with_value"] == {"bg": 0, "a": 0, "b": 2}
    assert stats["tags"]["counts"] == {"x": 0, "y": 2}
