"""A Parquet table's columns as typed fields (``fields=`` / ``--field``), on tables written by
Hugging Face ``datasets`` as the hub ships them: ``Image``, ``ClassLabel``, a ``Sequence`` (or
``List``) of boxes with their categories, ``Value("string")`` captions; read back field for field."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import packer
from packer.cli import cli
from packer.errors import SourceError

datasets = pytest.importorskip("datasets")

DETECTION = ["caption:text", "boxes=objects.bbox:boxes.xywh", "box_labels=objects.category:box_labels"]
CATEGORIES = ["person", "bicycle", "car"]


def _png(i: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.full((40, 60, 3), 30 * i, np.uint8)).save(out, "PNG")
    return out.getvalue()


def _objects(i: int) -> dict[str, list[Any]]:
    return {"bbox": [[2.0 * k, 1.0, 10.5, 8.0 + k] for k in range(i % 4)],
            "category": [(i + k) % len(CATEGORIES) for k in range(i % 4)]}


def _detection_table(path: Path, count: int = 7, *, as_list_of_structs: bool = False) -> list[dict[str, Any]]:
    box = {"bbox": datasets.Sequence(datasets.Value("float32"), length=4),
           "category": datasets.ClassLabel(names=CATEGORIES)}
    objects = (datasets.List({"bbox": box["bbox"], "category": box["category"]}) if as_list_of_structs
               else datasets.Sequence(box))
    features = datasets.Features({"image": datasets.Image(), "image_id": datasets.Value("int64"),
                                  "caption": datasets.Value("string"), "objects": objects})
    rows = [{"image": {"bytes": _png(i), "path": None}, "image_id": 100 + i, "caption": f"scene {i} \u00e9",
             "objects": ([{"bbox": b, "category": c} for b, c in zip(*_objects(i).values(), strict=True)]
                         if as_list_of_structs else _objects(i))} for i in range(count)]
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
    return rows


@pytest.mark.parametrize("as_list_of_structs", [False, True], ids=["sequence", "list"])
@pytest.mark.parametrize("backend", ["lmdb", "hdf5"])
def test_a_detection_table_reads_back_field_for_field(tmp_path: Path, backend: str,
                                                      as_list_of_structs: bool) -> None:
    rows = _detection_table(tmp_path / "train.parquet", as_list_of_structs=as_list_of_structs)
    manifest = packer.convert(tmp_path / "train.parquet", tmp_path / "ds", to=backend, workers=1,
                              fields=DETECTION).manifest
    assert [(f.name, f.type) for f in manifest.schema] == [
        ("image", "image"), ("caption", "text"), ("boxes", "boxes"), ("box_labels", "box_labels")]
    boxes, labels = manifest.schema.fields[2], manifest.schema.fields[3]
    assert boxes.params["format"] == "xywh" and labels.params["classes"] == CATEGORIES  # from the ClassLabel
    assert manifest.num_samples == len(rows) and not manifest.skipped
    dataset = packer.open_dataset(tmp_path / "ds", decode={"image": False})
    for i, row in enumerate(rows):
        got = dataset[i]
        assert bytes(got["image"]) == row["image"]["bytes"] and got["caption"] == row["caption"]
        assert got["boxes"].dtype == np.float32
        assert got["boxes"].reshape(-1, 4).tolist() == _objects(i)["bbox"]  # exact: float32 in, float32 out
        assert got["box_labels"].tolist() == _objects(i)["category"]
    assert manifest.extra["options"]["source"]["fields"] == DETECTION
    assert packer.update(tmp_path / "train.parquet", tmp_path / "ds", workers=1).up_to_date


def test_a_classification_table_keeps_its_label_beside_the_fields(tmp_path: Path) -> None:
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"]),
                                  "labels": datasets.Sequence(datasets.ClassLabel(names=["x", "y", "z"])),
                                  "score": datasets.Value("float64")})
    rows = [{"img": {"bytes": _png(i), "path": None}, "label": i % 2, "labels": [2, 0][: i % 3],
             "score": i / 8} for i in range(5)]
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(tmp_path / "t.parquet"))
    manifest = packer.convert(tmp_path / "t.parquet", tmp_path / "ds", to="lmdb", workers=1,
                              fields=["tags=labels:labels", "score:float"]).manifest
    assert [f.name for f in manifest.schema] == ["image", "label", "tags", "score"]
    assert manifest.classes == ("a", "b") and manifest.schema.fields[2].params["classes"] == ["x", "y", "z"]
    dataset = packer.open_dataset(tmp_path / "ds")
    for i, row in enumerate(rows):
        assert dataset[i]["label"] == row["label"] and dataset[i]["score"] == row["score"]
        assert dataset[i]["tags"].tolist() == sorted(row["labels"])  # stored distinct and sorted


def test_bad_values_skip_their_rows_naming_the_column(tmp_path: Path) -> None:
    features = datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string"),
                                  "bbox": datasets.Sequence(datasets.Sequence(datasets.Value("float32")))})
    rows = [{"image": {"bytes": _png(i), "path": None}, "caption": None if i == 1 else f"c{i}",
             "bbox": [[1, 1, 5, 5]] if i != 2 else [[1, 1, 5]]} for i in range(4)]
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(tmp_path / "t.parquet"))
    manifest = packer.convert(tmp_path / "t.parquet", tmp_path / "ds", to="lmdb", workers=1,
                              fields=["caption:text", "bbox:boxes"]).manifest
    skipped = {s.path: (s.reason, s.detail) for s in manifest.skipped}
    assert {path: reason for path, (reason, _) in skipped.items()} == {
        "t/00000001.png": "invalid_value", "t/00000002.png": "invalid_value"}
    assert "column 'caption' (text) is null" in skipped["t/00000001.png"][1]
    assert manifest.num_samples + len(manifest.skipped) == len(rows)


def test_bad_field_specs_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    _detection_table(tmp_path / "train.parquet", count=2)
    dst = tmp_path / "ds"
    cases = {("nope:text",): r"has no column 'nope' \(its columns: 'image', 'image_id'",
             ("objects.category:box_labels",): "box_labels need the boxes they label",
             ("a=objects.bbox:boxes", "b=caption:boxes.xywh"): "two boxes fields",
             ("objects.bbox:boxes.polar",): "TYPE one of"}
    for specs, message in cases.items():
        with pytest.raises(SourceError, match=message):
            packer.convert(tmp_path / "train.parquet", dst, to="lmdb", fields=list(specs))
        assert not dst.exists()


def test_the_command_line_prints_the_schema(tmp_path: Path) -> None:
    _detection_table(tmp_path / "train.parquet", count=3)
    args = ["convert", str(tmp_path / "train.parquet"), str(tmp_path / "ds"), "--to", "lmdb", "--dry-run",
            *[part for spec in DETECTION for part in ("--field", spec)]]
    plan = CliRunner().invoke(cli, args)
    assert plan.exit_code == 0, plan.output
    assert "fields: image (image, original), caption (text), boxes (boxes, xywh), box_labels (box_labels, " \
           "3 classes)" in plan.output
    assert "The columns ['image_id'] are no field: not kept (keep them with --field" in plan.output
