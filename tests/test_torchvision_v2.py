"""TorchvisionV2: a packed sample's image, masks and boxes as tv_tensors, moved together by
torchvision's own v2 transforms; the expected values are computed here with numpy.

torchvision is not a dependency, and its PyPI wheel does not load beside every torch (CI's CPU
torch 2.13 among them: its C++ operators are missing), so these tests run where it imports
(``pip install torch==2.14.1 torchvision==0.29.1``); the message without it is tested everywhere.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch.utils.data import DataLoader

import packer

SCHEMA: list[dict[str, Any]] = [
    {"name": "image", "type": "image"},
    {"name": "mask", "type": "mask", "params": {"image": "image", "classes": ["bg", "cat", "dog"]}},
    {"name": "boxes", "type": "boxes", "params": {"image": "image", "format": "xywh"}},
    {"name": "box_labels", "type": "box_labels", "params": {"boxes": "boxes", "classes": ["cat", "dog"]}},
    {"name": "caption", "type": "text"},
]
HEIGHT, WIDTH = 30, 40
#: One box in the top left corner, one in the middle: a centre crop keeps only the second.
BOXES = np.array([[0, 0, 6, 5], [14, 10, 12, 8]], np.float32)


def _sample(i: int) -> dict[str, Any]:
    rng = np.random.default_rng(i)
    return {"__key__": f"s{i}", "image": rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8),
            "mask": rng.integers(0, 3, (HEIGHT, WIDTH), dtype=np.uint8), "boxes": BOXES,
            "box_labels": np.array([0, 1]), "caption": f"sample {i}"}


def _dataset(tmp_path: Path, transform: Any) -> Any:
    dst = tmp_path / "ds"
    if not dst.exists():
        packer.write(dst, (_sample(i) for i in range(4)), SCHEMA, to="lmdb")
    dataset = packer.open_dataset(dst)
    dataset.transform = packer.TorchvisionV2.for_schema(dataset.schema, transform)
    return dataset


def test_without_torchvision_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    adapter = packer.TorchvisionV2.for_schema(packer.Schema.of(SCHEMA), lambda sample: sample)
    for name in ("torchvision", "torchvision.tv_tensors"):
        monkeypatch.setitem(sys.modules, name, None)  # what an import then finds: not installed
    with pytest.raises(ImportError, match=r"TorchvisionV2 needs torchvision: pip install torchvision"):
        adapter(_sample(0))


def test_the_targets_come_from_the_schema() -> None:
    adapter = packer.TorchvisionV2.for_schema(packer.Schema.of(SCHEMA), lambda sample: sample)
    assert adapter.targets.image == "image" and adapter.targets.masks == ("mask",)
    assert list(adapter.targets.boxes) == ["boxes"]
    boxes = adapter.targets.boxes["boxes"]
    assert boxes.format == "xywh" and boxes.rows == ("box_labels",)


def test_a_flip_moves_image_masks_and_boxes_together(tmp_path: Path) -> None:
    v2 = pytest.importorskip("torchvision.transforms.v2")
    tv_tensors = pytest.importorskip("torchvision.tv_tensors")
    dataset = _dataset(tmp_path, v2.RandomHorizontalFlip(p=1.0))
    out, want = dataset[1], _sample(1)
    assert isinstance(out["image"], tv_tensors.Image) and isinstance(out["mask"], tv_tensors.Mask)
    assert np.array_equal(out["image"].permute(1, 2, 0).numpy(), want["image"][:, ::-1])
    assert np.array_equal(out["mask"].numpy(), want["mask"][:, ::-1])
    boxes = out["boxes"]
    assert isinstance(boxes, tv_tensors.BoundingBoxes) and tuple(boxes.canvas_size) == (HEIGHT, WIDTH)
    flipped = BOXES.copy()
    flipped[:, 0] = WIDTH - BOXES[:, 0] - BOXES[:, 2]
    assert np.array_equal(boxes.numpy(), flipped)
    assert out["box_labels"].tolist() == [0, 1] and out["caption"] == "sample 1"


def test_a_crop_drops_boxes_left_outside_with_their_labels(tmp_path: Path) -> None:
    v2 = pytest.importorskip("torchvision.transforms.v2")
    crop = v2.Compose([v2.CenterCrop((16, 20)),
                       v2.SanitizeBoundingBoxes(labels_getter=lambda sample: sample["box_labels"])])
    out, want = _dataset(tmp_path, crop)[2], _sample(2)
    top, left = (HEIGHT - 16) // 2, (WIDTH - 20) // 2
    assert np.array_equal(out["mask"].numpy(), want["mask"][top:top + 16, left:left + 20])
    assert tuple(out["boxes"].canvas_size) == (16, 20)
    assert out["boxes"].numpy().tolist() == [[14 - left, 10 - top, 12, 8]]  # the corner box is gone
    assert out["box_labels"].tolist() == [1]  # and its label with it


def test_normalised_boxes_are_given_in_pixels(tmp_path: Path) -> None:
    pytest.importorskip("torchvision.tv_tensors")
    schema = [{"name": "image", "type": "image"},
              {"name": "boxes", "type": "boxes", "params": {"image": "image", "format": "cxcywh",
                                                            "normalized": True}}]
    packer.write(tmp_path / "yolo", [{"image": _sample(0)["image"], "boxes": [[0.5, 0.5, 0.25, 0.5]]}],
                 schema, to="lmdb")
    dataset = packer.open_dataset(tmp_path / "yolo")
    dataset.transform = packer.TorchvisionV2.for_schema(dataset.schema, lambda sample: sample)
    boxes = dataset[0]["boxes"]
    assert boxes.format.name == "CXCYWH" and tuple(boxes.canvas_size) == (HEIGHT, WIDTH)
    assert boxes.numpy().tolist() == [[20.0, 15.0, 10.0, 15.0]]


def test_it_runs_in_loader_workers(tmp_path: Path) -> None:
    v2 = pytest.importorskip("torchvision.transforms.v2")
    dataset = _dataset(tmp_path, v2.Compose([v2.RandomHorizontalFlip(p=1.0), v2.Resize((15, 20))]))
    loader = DataLoader(dataset, batch_size=2, num_workers=2, collate_fn=list)
    seen = [(sample["caption"], tuple(sample["image"].shape), tuple(sample["boxes"].canvas_size))
            for batch in loader for sample in batch]
    assert seen == [(f"sample {i}", (3, 15, 20), (15, 20)) for i in range(4)]
