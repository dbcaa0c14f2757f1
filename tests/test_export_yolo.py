"""``export_yolo`` / ``packer export --as-yolo``: a dataset with boxes written as a YOLO set
(images/, labels/*.txt, data.yaml) that converts back to the same boxes, classes and segments;
boxes of any format and unit normalised to cxcywh."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import packer
from packer.cli import cli
from packer.errors import DatasetError

yaml = pytest.importorskip("yaml")

NAMES = ["person", "bicycle", "traffic light"]
LABELS = {"train/a": ["0 0.5 0.5 0.25 0.5", "2 0.1 0.2 0.1 0.1"],
          "train/b": ["1 0.3 0.4 0.2 0.2", "0 0.2 0.2 0.4 0.2 0.4 0.6"],  # a box, a triangle
          "train/c": None, "val/d": ["2 0.9 0.9 0.2 0.2"]}


def _yolo_set(root: Path) -> Path:
    for i, (stem, lines) in enumerate(LABELS.items()):
        image = root / "images" / f"{stem}.jpg"
        image.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.random.default_rng(i).integers(0, 256, (30, 40, 3), dtype=np.uint8)).save(image)
        if lines is not None:
            label = root / "labels" / f"{stem}.txt"
            label.parent.mkdir(parents=True, exist_ok=True)
            label.write_text("\n".join(lines) + "\n")
    names = dict(enumerate(NAMES))
    (root / "data.yaml").write_text(yaml.safe_dump({"path": str(root), "train": "images/train",
                                                    "val": "images/val", "names": names}))
    return root


def test_a_yolo_set_round_trips_exactly(tmp_path: Path) -> None:
    source = _yolo_set(tmp_path / "set")
    packer.convert(source, tmp_path / "ds", to="lmdb", workers=1, source_format="yolo")
    result = packer.export_yolo(tmp_path / "ds", tmp_path / "out")
    assert (result.written, result.label_files, result.boxes, result.classes) == (4, 3, 5, tuple(NAMES))
    for stem, lines in LABELS.items():  # the very lines the set had; no file for a background image
        label = tmp_path / "out" / "labels" / f"{stem}.txt"
        assert (label.read_text().splitlines() if label.exists() else None) == lines
        assert (tmp_path / "out" / "images" / f"{stem}.jpg").read_bytes() == \
            (source / "images" / f"{stem}.jpg").read_bytes()
    assert yaml.safe_load((tmp_path / "out" / "data.yaml").read_text())["names"] == dict(enumerate(NAMES))
    packer.convert(tmp_path / "out", tmp_path / "again", to="lmdb", workers=1, source_format="yolo")
    first, again = (packer.open_dataset(tmp_path / d, decode={"image": False}) for d in ("ds", "again"))
    assert first.samples == again.samples
    for i in range(len(first)):
        assert np.array_equal(first[i]["boxes"], again[i]["boxes"])  # bit for bit
        assert first[i]["box_labels"].tolist() == again[i]["box_labels"].tolist()
        assert first[i]["segments"] == again[i]["segments"]


@pytest.mark.parametrize(("fmt", "normalized"), [("xyxy", False), ("xywh", False), ("cxcywh", True)])
def test_boxes_of_any_format_are_written_normalised(tmp_path: Path, fmt: str, normalized: bool) -> None:
    corners = np.array([[10.0, 5.0, 30.0, 25.0]])  # on a 40 x 50 image
    x1, y1, x2, y2 = corners.T
    boxes = {"xyxy": corners, "xywh": np.stack([x1, y1, x2 - x1, y2 - y1], 1),
             "cxcywh": np.stack([(x1 + x2) / 80, (y1 + y2) / 100, (x2 - x1) / 40, (y2 - y1) / 50], 1)}[fmt]
    schema: list[dict[str, Any]] = [
        {"name": "image", "type": "image"},
        {"name": "boxes", "type": "boxes",
         "params": {"image": "image", "format": fmt, "normalized": normalized}},
        {"name": "box_labels", "type": "box_labels", "params": {"boxes": "boxes", "classes": ["a", "b"]}}]
    sample = {"__key__": "x/0001", "image": np.zeros((50, 40, 3), np.uint8),
              "boxes": boxes.astype(np.float32), "box_labels": [1]}
    packer.write(tmp_path / "ds", [sample], schema, to="lmdb", workers=1)
    packer.export_yolo(tmp_path / "ds", tmp_path / "out")
    label = next((tmp_path / "out" / "labels").rglob("*.txt"))
    cls, *numbers = label.read_text().split()
    assert cls == "1" and np.allclose([float(n) for n in numbers], [0.5, 0.3, 0.5, 0.4], atol=1e-6)


def test_a_dataset_without_boxes_is_refused_and_the_cli_converts(tmp_path: Path) -> None:
    schema = [{"name": "image", "type": "image"}, {"name": "caption", "type": "text"}]
    packer.write(tmp_path / "captions", [{"__key__": "a", "image": np.zeros((4, 4, 3), np.uint8),
                                          "caption": "x"}], schema, to="lmdb", workers=1)
    with pytest.raises(DatasetError, match="no boxes with box labels"):
        packer.export_yolo(tmp_path / "captions", tmp_path / "out")
    packer.convert(_yolo_set(tmp_path / "set"), tmp_path / "ds", to="hdf5", workers=1, source_format="yolo")
    done = CliRunner().invoke(cli, ["export", str(tmp_path / "ds"), str(tmp_path / "out"), "--as-yolo"])
    assert done.exit_code == 0, done.output
    assert "Exported 4 images with 5 boxes of 3 classes (3 label files) as a YOLO set" in done.output
    tree = CliRunner().invoke(cli, ["export", str(tmp_path / "ds"), str(tmp_path / "tree")])
    assert tree.exit_code != 0 and "--as-yolo" in tree.output and "--as-webdataset" in tree.output
