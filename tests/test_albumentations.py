"""packer.Albumentations: a real albumentations pipeline moves image, mask and boxes together
over packed samples, in the main process and in spawned DataLoader workers."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import packer

A = pytest.importorskip("albumentations")

SCHEMA = [
    {"name": "image", "type": "image"},
    {"name": "mask", "type": "mask", "params": {"image": "image", "classes": ["bg", "thing"]}},
    {"name": "boxes", "type": "boxes", "params": {"image": "image", "format": "xyxy"}},
    {"name": "box_labels", "type": "box_labels", "params": {"boxes": "boxes", "classes": ["a", "b"]}},
]


def _sample(i: int) -> dict[str, Any]:
    """A 40x60 image whose one box covers exactly the mask's square of ones."""
    image = np.zeros((40, 60, 3), np.uint8)
    mask = np.zeros((40, 60), np.uint8)
    x0, y0 = 2 + i, 5
    image[y0:y0 + 10, x0:x0 + 12] = 200
    mask[y0:y0 + 10, x0:x0 + 12] = 1
    boxes = np.array([[x0, y0, x0 + 12, y0 + 10], [50, 30, 58, 38]], np.float32)
    return {"image": image, "mask": mask, "boxes": boxes, "box_labels": [i % 2, 1]}


@pytest.fixture
def dataset_path(tmp_path: Path) -> Path:
    packer.write(tmp_path / "ds", [_sample(i) for i in range(6)], SCHEMA, to="lmdb")
    return tmp_path / "ds"


def _adapter() -> packer.Albumentations:
    aug = A.Compose([A.HorizontalFlip(p=1.0), A.Crop(x_min=20, y_min=0, x_max=60, y_max=30)],
                    bbox_params=A.BboxParams(format="pascal_voc", label_fields=["box_labels"]))
    return packer.Albumentations(aug, masks=("mask",), boxes="boxes", box_fields=("box_labels",))


def test_image_mask_and_boxes_move_together(dataset_path: Path) -> None:
    ds = packer.open_dataset(dataset_path, transform=_adapter())
    for i in range(6):
        out = ds[i]
        assert out["image"].shape == (30, 40, 3) and out["mask"].shape == (30, 40)
        # flipped: x -> 60 - x; then the crop keeps 20 <= x < 60 and y < 30 (x -> x - 20): the
        # far box (x 50..58 -> 2..10, y 30..38) falls outside, so the square alone remains
        x0 = 2 + i
        # (albumentations computes in normalised floats: exact to float32 rounding)
        assert np.allclose(out["boxes"], [[40 - (x0 + 12), 5, 40 - x0, 15]], atol=1e-4)
        assert out["box_labels"].tolist() == [i % 2] and out["box_labels"].dtype == np.int64
        ys, xs = np.nonzero(out["mask"])
        assert np.allclose([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], out["boxes"][0], atol=1e-4)
        assert (out["image"][out["mask"] == 1] == 200).all()


def test_box_fields_must_be_label_fields() -> None:
    aug = A.Compose([A.HorizontalFlip()], bbox_params=A.BboxParams(format="pascal_voc", label_fields=[]))
    with pytest.raises(ValueError, match="box_labels"):
        packer.Albumentations(aug, boxes="boxes", box_fields=("box_labels",))
    with pytest.raises(ValueError, match="boxes="):
        packer.Albumentations(aug, box_fields=("box_labels",))


def _to_tensors(adapter: packer.Albumentations, sample: dict[str, Any]) -> dict[str, Any]:
    out = adapter(sample)
    return {"image": torch.from_numpy(out["image"]).permute(2, 0, 1), "mask": torch.from_numpy(out["mask"]),
            "boxes": torch.from_numpy(out["boxes"]), "box_labels": torch.from_numpy(out["box_labels"])}


@pytest.mark.slow
def test_in_spawned_workers(dataset_path: Path) -> None:
    ds = packer.open_dataset(dataset_path, transform=functools.partial(_to_tensors, _adapter()))
    collate = functools.partial(packer.collate_fields, pad={"boxes": 0, "box_labels": -1})
    loader = DataLoader(ds, batch_size=3, num_workers=2, multiprocessing_context="spawn", collate_fn=collate)
    batches = list(loader)
    assert [b["image"].shape for b in batches] == [torch.Size([3, 3, 30, 40])] * 2
    assert torch.cat([b["box_labels"] for b in batches]).flatten().tolist() == [0, 1, 0, 1, 0, 1]
