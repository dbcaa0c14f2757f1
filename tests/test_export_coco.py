"""``export_coco`` / ``packer export --as-coco``: a dataset with boxes written as a COCO instances
file beside its images, which pycocotools reads and which converts back field for field (a COCO
dataset's ids, crowds, areas and segmentations kept); boxes of any format become xywh pixels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import packer
from packer.cli import cli

coco_api = pytest.importorskip("pycocotools.coco")

CATEGORIES = [{"id": 3, "name": "car"}, {"id": 7, "name": "bus"}, {"id": 12, "name": "bike"}]


def _coco(folder: Path) -> Path:
    folder.mkdir(parents=True)
    images = []
    files = {5: ("a.jpg", 40, 30), 2: ("sub/b.png", 32, 32), 9: ("c.jpg", 20, 10)}
    for ident, (name, width, height) in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        pixels = np.random.default_rng(ident).integers(0, 256, (height, width, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / name)
        images.append({"id": ident, "file_name": name, "width": width, "height": height})
    annotations = [
        {"id": 100, "image_id": 5, "category_id": 7, "bbox": [1.5, 2.25, 10.0, 8.0], "area": 71.5,
         "iscrowd": 0, "segmentation": [[1.5, 2.25, 11.5, 2.25, 11.5, 10.25]]},
        {"id": 101, "image_id": 5, "category_id": 12, "bbox": [20.0, 10.0, 5.0, 5.0], "area": 25.0,
         "iscrowd": 1, "segmentation": {"size": [30, 40], "counts": "0k1"}},
        {"id": 102, "image_id": 9, "category_id": 3, "bbox": [0.0, 0.0, 4.0, 4.0], "area": 16.0, "iscrowd": 0,
         "segmentation": [[0, 0, 4, 0, 4, 4]]},
    ]
    path = folder / "instances.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": CATEGORIES}))
    return path


def test_a_coco_set_round_trips_field_for_field(tmp_path: Path) -> None:
    packer.convert(_coco(tmp_path / "src"), tmp_path / "ds", to="lmdb", workers=1)
    result = packer.export_coco(tmp_path / "ds", tmp_path / "out")
    assert (result.images, result.annotations, result.categories) == (3, 3, 3)
    api = coco_api.COCO(result.annotations_file)  # pycocotools reads what we wrote
    assert sorted(api.getImgIds()) == [2, 5, 9] and api.loadCats([7])[0]["name"] == "bus"
    assert api.loadImgs([2])[0] == {"id": 2, "file_name": "sub/b.png", "width": 32, "height": 32}
    assert (tmp_path / "out" / "sub" / "b.png").read_bytes() == \
        (tmp_path / "src" / "sub" / "b.png").read_bytes()
    packer.convert(result.annotations_file, tmp_path / "again", to="lmdb", workers=1)
    first, again = (packer.open_dataset(tmp_path / d, decode={"image": False}) for d in ("ds", "again"))
    assert first.samples == again.samples
    assert again.manifest.extra["coco"]["category_ids"] == [3, 7, 12]
    for i in range(len(first)):
        a, b = first[i], again[i]
        assert bytes(a["image"]) == bytes(b["image"]) and a["image_id"] == b["image_id"]
        for name in ("boxes", "box_labels", "iscrowd", "area"):
            assert np.array_equal(a[name], b[name]), name
        assert a["segmentation"] == b["segmentation"]


def test_normalised_boxes_become_xywh_pixels_and_the_cli_converts(tmp_path: Path) -> None:
    schema: list[dict[str, Any]] = [
        {"name": "image", "type": "image"},
        {"name": "boxes", "type": "boxes",
         "params": {"image": "image", "format": "cxcywh", "normalized": True}},
        {"name": "box_labels", "type": "box_labels", "params": {"boxes": "boxes", "classes": ["a", "b"]}}]
    sample = {"__key__": "x/0001", "image": np.zeros((50, 40, 3), np.uint8),
              "boxes": np.array([[0.5, 0.3, 0.5, 0.4]], np.float32), "box_labels": [1]}
    packer.write(tmp_path / "ds", [sample], schema, to="hdf5", workers=1)
    done = CliRunner().invoke(cli, ["export", str(tmp_path / "ds"), str(tmp_path / "out"), "--as-coco"])
    assert done.exit_code == 0, done.output
    assert "Exported 1 images with 1 annotations of 2 categories as a COCO file" in done.output
    document = json.loads((tmp_path / "out" / "annotations.json").read_text())
    (annotation,) = document["annotations"]
    assert np.allclose(annotation["bbox"], [10.0, 5.0, 20.0, 20.0], atol=1e-4)
    assert annotation["category_id"] == 2 and annotation["image_id"] == 1
    assert annotation["area"] == pytest.approx(400)
    assert document["categories"] == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
