"""CocoMasks: a COCO dataset's instance masks decoded at read time, equal to what pycocotools'
own ``COCO.annToMask`` draws for each annotation of the same file (polygons, several rings,
compressed and uncompressed RLE), in box order, in loader workers too."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from torch.utils.data import DataLoader

import packer
from packer.read.fields.coco_masks import instance_masks

coco_api = pytest.importorskip("pycocotools.coco")
mask_api = pytest.importorskip("pycocotools.mask")
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword")

SIZES = {1: (40, 30), 2: (24, 20), 3: (32, 32)}  # image id -> (width, height)


def _rles(width: int, height: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A compressed RLE (counts as text, as COCO files hold crowds) and an uncompressed one."""
    mask = np.zeros((height, width), np.uint8)
    mask[3:9, 4:15] = 1
    compressed = mask_api.encode(np.asfortranarray(mask))
    flat = mask.flatten(order="F")
    runs, value, count = [], 0, 0
    for pixel in flat:
        if pixel != value:
            runs.append(count)
            value, count = pixel, 0
        count += 1
    runs.append(count)
    return ({"size": [height, width], "counts": compressed["counts"].decode("ascii")},
            {"size": [height, width], "counts": runs})


def _coco_file(folder: Path) -> Path:
    folder.mkdir(parents=True)
    images = []
    for ident, (width, height) in SIZES.items():
        Image.fromarray(np.full((height, width, 3), 20 * ident, np.uint8)).save(folder / f"{ident}.png")
        images.append({"id": ident, "file_name": f"{ident}.png", "width": width, "height": height})
    compressed, uncompressed = _rles(24, 20)
    annotations = [
        {"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 2, 10, 10], "iscrowd": 0,
         "segmentation": [[2, 2, 12, 2, 12, 12, 2, 12]]},
        {"id": 2, "image_id": 1, "category_id": 2, "bbox": [15, 5, 20, 20], "iscrowd": 0,  # two rings
         "segmentation": [[15, 5, 25, 5, 20, 15], [26.5, 14.2, 34.7, 14.2, 34.7, 24.9, 26.5, 24.9]]},
        {"id": 3, "image_id": 2, "category_id": 1, "bbox": [4, 3, 11, 6], "iscrowd": 1,
         "segmentation": compressed},
        {"id": 4, "image_id": 2, "category_id": 2, "bbox": [4, 3, 11, 6], "iscrowd": 1,
         "segmentation": uncompressed},
    ]
    categories = [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    path = folder / "instances.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


@pytest.fixture
def coco(tmp_path: Path) -> tuple[Path, Path]:
    path = _coco_file(tmp_path / "coco")
    packer.convert(path, tmp_path / "ds", to="lmdb", workers=1)
    return path, tmp_path / "ds"


@pytest.mark.parametrize("decoded", [True, False], ids=["decoded", "stored-bytes"])
def test_the_masks_are_pycocotools_own(coco: tuple[Path, Path], decoded: bool) -> None:
    path, dst = coco
    theirs = coco_api.COCO(str(path))
    dataset = packer.open_dataset(dst, **({} if decoded else {"decode": {"image": False}}))
    dataset.transform = packer.CocoMasks()
    for i, image_id in enumerate(sorted(SIZES)):
        width, height = SIZES[image_id]
        sample = dataset[i]
        anns = theirs.loadAnns(theirs.getAnnIds(imgIds=[image_id]))
        masks = sample["masks"]
        assert masks.dtype == np.uint8 and masks.shape == (len(anns), height, width)
        for mask, ann in zip(masks, anns, strict=True):
            assert mask.any() and np.array_equal(mask, theirs.annToMask(ann)), ann["id"]
        assert len(sample["boxes"]) == len(masks)  # one mask per box, in box order
    assert dataset[2]["masks"].shape == (0, 32, 32)  # no annotation: no mask


def test_it_runs_in_loader_workers(coco: tuple[Path, Path]) -> None:
    dataset = packer.open_dataset(coco[1])
    dataset.transform = packer.CocoMasks(out="instance_masks")
    loader = DataLoader(dataset, batch_size=2, num_workers=2, collate_fn=list)
    shapes = [sample["instance_masks"].shape for batch in loader for sample in batch]
    assert shapes == [(2, 30, 40), (2, 20, 24), (0, 32, 32)]


@pytest.mark.parametrize(("segmentation", "message"), [
    ([{"size": [5, 5], "counts": "abc"}], r"annotation 0's RLE is 5x5 .* its image 20x24"),
    ([[1, 2, "x", 4, 5, 6]], r"annotation 0's polygons are not lists of x, y coordinates"),
    ([[]], r"annotation 0's polygons are not lists"),
    (["text"], r"annotation 0's segmentation is neither polygons nor RLE"),
])
def test_a_malformed_segmentation_is_named(segmentation: list[Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        instance_masks(segmentation, 20, 24)


def test_no_segmentation_is_an_empty_mask() -> None:
    assert not instance_masks([None], 4, 6).any() and instance_masks([None], 4, 6).shape == (1, 4, 6)


def test_without_pycocotools_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("pycocotools", "pycocotools.mask"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"packer-shards\[coco\]"):
        instance_masks([[1, 1, 3, 1, 3, 3]], 4, 4)
