"""The joint fast path (packer.read.joint): image, masks and boxes cropped, resized and flipped
with the same parameters, checked against naive PIL/numpy references."""

from __future__ import annotations

import functools
import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

import packer
from packer.read.crop_params import random_resized_crop_params
from packer.read.joint import (
    BoxField,
    JointLetterbox,
    JointRandomResizedCropFlip,
    JointScaleJitterCrop,
    targets_for_schema,
)
from packer.read.joint.boxes import move_boxes
from packer.read.joint.layouts import crop_placement
from packer.read.transforms import RandomResizedCropFlip

SCHEMA: list[dict[str, Any]] = [
    {"name": "image", "type": "image"},
    {"name": "mask", "type": "mask", "params": {"image": "image", "classes": ["bg", "a", "b"]}},
    {"name": "boxes", "type": "boxes", "params": {"image": "image"}},
    {"name": "box_labels", "type": "box_labels", "params": {"boxes": "boxes", "classes": ["a", "b"]}},
    {"name": "caption", "type": "text"},
]
TARGETS = {"masks": ("mask",), "boxes": {"boxes": ("box_labels",)}, "resampler": "pil"}


def _picture(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A smooth RGB image (gradients plus low-frequency noise): resamplers agree closely on it."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 / width, y * 255 / height, (x + y) * 127 / (width + height)], axis=-1)
    noise = np.kron(rng.integers(0, 40, (height // 8 + 1, width // 8 + 1, 3)), np.ones((8, 8, 1)))
    return (base + noise[:height, :width]).clip(0, 255).astype(np.uint8)


def _encoded(array: np.ndarray, fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, fmt, quality=95)
    return buffer.getvalue()


def _mask(width: int, height: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 3, (height, width), dtype=np.uint8)


BOXES = np.array([[2, 3, 40, 30], [50, 10, 90, 70], [0, 0, 99, 79], [70, 60, 72, 62]], np.float32)


def _sample(width: int = 100, height: int = 80, fmt: str = "PNG") -> dict[str, Any]:
    return {"image": _encoded(_picture(width, height), fmt), "mask": _mask(width, height),
            "boxes": BOXES.copy(), "box_labels": np.array([0, 1, 1, 0], np.int64), "caption": "hi"}


def _reference_boxes(boxes: np.ndarray, crop: tuple[float, float, float, float], scale: tuple[float, float],
                     size: tuple[int, int], flip: bool) -> np.ndarray:
    """Plain numpy: shift by the crop's corner, scale, clip, drop empty, flip (xyxy pixels)."""
    left, top = crop[0], crop[1]
    out = (boxes.astype(np.float64) - [left, top, left, top]) * [scale[0], scale[1], scale[0], scale[1]]
    out = out.clip(0, [size[1], size[0], size[1], size[0]])
    out = out[(out[:, 2] > out[:, 0]) & (out[:, 3] > out[:, 1])]
    if flip:
        out = np.stack([size[1] - out[:, 2], out[:, 1], size[1] - out[:, 0], out[:, 3]], axis=1)
    return out


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_joint_rrc_image_is_exactly_random_resized_crop_flip(fmt: str) -> None:
    sample = _sample(fmt=fmt)
    plain = RandomResizedCropFlip(32, scale=(0.2, 1.0))
    joint = JointRandomResizedCropFlip(32, scale=(0.2, 1.0), **{**TARGETS, "resampler": "auto"})
    for seed in range(6):
        torch.manual_seed(seed)
        want = plain(sample["image"])
        torch.manual_seed(seed)
        got = joint(sample)
        assert torch.equal(got["image"], want) and got["image"].dtype == torch.uint8
        torch.manual_seed(seed)  # a PIL image (decode=True) gives the same crop
        pil = joint({**sample, "image": Image.open(io.BytesIO(sample["image"]))})
        assert torch.equal(pil["mask"], got["mask"]) and torch.equal(pil["boxes"], got["boxes"])


def test_joint_rrc_matches_a_naive_pil_reference() -> None:
    sample, size = _sample(), (24, 40)
    joint = JointRandomResizedCropFlip(size, scale=(0.3, 1.0), **TARGETS)
    flips = set()
    for seed in range(12):
        torch.manual_seed(seed)
        top, left, h, w = random_resized_crop_params(100, 80, (0.3, 1.0), (3 / 4, 4 / 3))
        flip = torch.rand(1).item() < 0.5
        flips.add(flip)
        torch.manual_seed(seed)
        got = joint(sample)
        crop = (left, top, left + w, top + h)
        full = Image.open(io.BytesIO(sample["image"])).convert("RGB")
        image = np.asarray(full.crop(crop).resize((size[1], size[0]), Image.Resampling.BILINEAR))
        mask = np.asarray(Image.fromarray(sample["mask"]).crop(crop).resize((size[1], size[0]),
                                                                            Image.Resampling.NEAREST))
        if flip:
            image, mask = image[:, ::-1], mask[:, ::-1]
        assert np.abs(got["image"].permute(1, 2, 0).numpy().astype(int) - image).mean() < 2.0
        assert np.array_equal(got["mask"].numpy(), mask) and got["mask"].dtype == torch.uint8
        want = _reference_boxes(BOXES, crop, (size[1] / w, size[0] / h), size, flip)
        assert got["boxes"].shape == want.shape and np.abs(got["boxes"].numpy() - want).max() < 1.0
        assert len(got["box_labels"]) == len(want) and got["box_labels"].dtype == torch.int64
        assert got["caption"] == "hi"
    assert flips == {True, False}


@pytest.mark.parametrize("fmt", ["xyxy", "xywh", "cxcywh"])
@pytest.mark.parametrize("normalized", [False, True])
def test_boxes_move_in_their_own_format_and_normalisation(fmt: str, normalized: bool) -> None:
    corners = np.array([[10, 20, 30, 60], [0, 0, 100, 80]], np.float64)

    def to_fmt(c: np.ndarray, w: float, h: float) -> np.ndarray:
        x1, y1, x2, y2 = c.T
        out = {"xyxy": c, "xywh": np.stack([x1, y1, x2 - x1, y2 - y1], 1),
               "cxcywh": np.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], 1)}[fmt]
        return out / [w, h, w, h] if normalized else out
    placement = crop_placement((10, 5, 40, 50), (20, 25), flip=True)  # top, left, height, width
    got, keep = move_boxes(to_fmt(corners, 100, 80), placement, (100, 80), fmt=fmt, normalized=normalized)
    want = _reference_boxes(corners, (5, 10), (0.5, 0.5), (20, 25), flip=True)
    assert keep.tolist() == [True, True] and got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), to_fmt(want, 25, 20), atol=1e-4)
    assert want[1].tolist() == [0, 0, 25, 20]  # the whole-image box is clipped to the output


def test_clipping_min_visibility_drops_rows_and_empty_boxes_work() -> None:
    sample = {**_sample(), "score": np.array([0.1, 0.2, 0.3, 0.4], np.float32)}
    placement = crop_placement((0, 0, 40, 50), (40, 50), flip=False)  # the top-left 50x40, no scaling
    boxes, keep = move_boxes(BOXES, placement, (100, 80), min_visibility=0.5)
    # box 0 wholly inside; box 1 (x 50..90) and box 3 fall outside; box 2 keeps 50*40 of 99*79 (< 0.5)
    assert keep.tolist() == [True, False, False, False]
    assert boxes.tolist() == [[2, 3, 40, 30]]
    joint = JointRandomResizedCropFlip(16, scale=(1.0, 1.0), ratio=(1.25, 1.25), flip_p=0.0,
                                       masks=("mask",), boxes={"boxes": ("box_labels", "score")})
    out = joint(sample)  # the whole image
    assert out["boxes"].shape == (4, 4) and out["box_labels"].tolist() == [0, 1, 1, 0]
    tight = JointLetterbox(20, boxes={"boxes": BoxField(rows=("box_labels", "score"))}, min_visibility=0.9)
    empty = tight({**sample, "boxes": np.zeros((0, 4), np.float32), "box_labels": np.zeros(0, np.int64),
                   "score": np.zeros(0, np.float32)})
    assert empty["boxes"].shape == (0, 4) and empty["box_labels"].shape == (0,)
    assert empty["score"].shape == (0,)
    with pytest.raises(ValueError, match="rows"):
        tight({**sample, "score": np.zeros(3, np.float32)})
    with torch.random.fork_rng():
        torch.manual_seed(3)
        cut = JointScaleJitterCrop(30, scale=(2.0, 2.0), flip_p=0.0, min_visibility=0.6,
                                   boxes={"boxes": ("box_labels", "score")})(sample)
    assert len(cut["boxes"]) == len(cut["box_labels"]) == len(cut["score"]) < 4
    assert set(cut["score"].tolist()) <= {np.float32(v).item() for v in (0.1, 0.2, 0.3, 0.4)}


def test_scale_jitter_masks_are_exact_and_padding_is_the_ignore_index() -> None:
    sample, size = _sample(), (48, 48)
    joint = JointScaleJitterCrop(size, scale=(0.3, 1.6), **TARGETS)
    padded = cropped = 0
    for seed in range(12):
        torch.manual_seed(seed)
        factor = torch.empty(1).uniform_(0.3, 1.6).item() * min(48 / 80, 48 / 100)
        sh, sw = max(1, round(80 * factor)), max(1, round(100 * factor))
        top = int(torch.randint(0, max(0, sh - 48) + 1, (1,)).item())
        left = int(torch.randint(0, max(0, sw - 48) + 1, (1,)).item())
        flip = torch.rand(1).item() < 0.5
        torch.manual_seed(seed)
        got = joint(sample)
        whole = np.asarray(Image.fromarray(sample["mask"]).resize((sw, sh), Image.Resampling.NEAREST))
        canvas = np.full((max(sh, 48), max(sw, 48)), 255, np.uint8)
        canvas[:sh, :sw] = whole
        want = canvas[top:top + 48, left:left + 48]
        if flip:
            want = want[:, ::-1]
        assert np.array_equal(got["mask"].numpy(), want)
        padded += sh < 48 or sw < 48
        cropped += sh > 48 or sw > 48
        if sw < 48 and not flip:
            assert (got["image"][:, :, sw:] == 0).all()
        boxes = _reference_boxes(BOXES, (left * 100 / sw, top * 80 / sh), (sw / 100, sh / 80), size, flip)
        assert got["boxes"].shape == boxes.shape and np.abs(got["boxes"].numpy() - boxes).max() < 1.0
    assert padded and cropped


def test_letterbox_geometry_and_uint16_masks() -> None:
    mask = np.random.default_rng(5).integers(0, 600, (80, 100)).astype(np.uint16)
    sample = {**_sample(), "mask": mask}
    out = JointLetterbox((64, 64), **TARGETS)(sample)  # 100x80 -> 64x51, 6 rows above, 7 below
    image, got = out["image"], out["mask"]
    assert image.shape == (3, 64, 64) and got.dtype == torch.uint16
    assert (image[:, :6] == 114).all() and (image[:, 57:] == 114).all() and (image[:, 6:57] != 114).any()
    assert (got[:6] == 255).all() and (got[57:] == 255).all()
    wide = Image.fromarray(mask.astype(np.int32), "I")  # Pillow's 32-bit path, as uint8 masks use
    reference = np.asarray(wide.resize((64, 51), Image.Resampling.NEAREST))
    assert np.array_equal(got[6:57].numpy().astype(np.int64), reference)
    np.testing.assert_allclose(out["boxes"].numpy(), BOXES * [0.64, 51 / 80, 0.64, 51 / 80] + [0, 6, 0, 6],
                               atol=1e-4)  # each axis scaled to its rounded size
    assert torch.equal(JointLetterbox((64, 64), **TARGETS)(sample)["mask"], got)  # no randomness


def test_for_schema_binds_the_tied_fields_and_pickles() -> None:
    schema = packer.format.fields.schema.Schema.of(
        [*SCHEMA, {"name": "nboxes", "type": "boxes",
                   "params": {"image": "image", "format": "cxcywh", "normalized": True}}])
    targets = targets_for_schema(schema)
    assert targets.masks == ("mask",) and targets.boxes["boxes"].rows == ("box_labels",)
    assert targets.boxes["nboxes"] == BoxField("cxcywh", True, ())
    joint = JointRandomResizedCropFlip.for_schema(schema, 16, generator=None)
    again = pickle.loads(pickle.dumps(joint))
    torch.manual_seed(0)
    a = joint(_sample())
    torch.manual_seed(0)
    b = again(_sample())
    assert torch.equal(a["image"], b["image"]) and torch.equal(a["mask"], b["mask"])
    with pytest.raises(ValueError, match="image"):
        targets_for_schema(schema, "mask")
    with pytest.raises(TypeError, match="stored bytes"):
        JointLetterbox(8, masks=("mask",))({**_sample(), "mask": b"PKMK"})


def _written(i: int) -> dict[str, Any]:
    width, height = 40 + i % 3 * 8, 32 + i % 2 * 8
    k = i % 4
    boxes = np.array([[j, j + 1, j + 20.5, j + 22.25] for j in range(k)], np.float32).reshape(k, 4)
    return {"__key__": f"s/{i:03d}", "image": _picture(width, height, i), "mask": _mask(width, height, i),
            "boxes": boxes, "box_labels": [j % 2 for j in range(k)], "caption": f"sample {i}"}


@pytest.mark.slow
def test_a_spawned_loader_batches_joint_samples(tmp_path: Path) -> None:
    packer.write(tmp_path / "ds", (_written(i) for i in range(12)), SCHEMA, to="lmdb", shard_size="8KB")
    schema = packer.open_dataset(tmp_path / "ds").schema
    transform = JointScaleJitterCrop.for_schema(schema, (24, 32))
    dataset = packer.open_dataset(tmp_path / "ds", decode={"image": False}, transform=transform)
    assert isinstance(dataset[0]["image"], torch.Tensor)
    collate = functools.partial(packer.collate_fields, pad={"boxes": 0, "box_labels": -1})
    loader = DataLoader(dataset, batch_size=4, num_workers=2, multiprocessing_context="spawn",
                        collate_fn=collate)
    batches = list(loader)
    assert [c for b in batches for c in b["caption"]] == [f"sample {i}" for i in range(12)]
    for batch in batches:
        assert batch["image"].shape == (4, 3, 24, 32) and batch["image"].dtype == torch.uint8
        assert batch["mask"].shape == (4, 24, 32) and batch["mask"].dtype == torch.uint8
        assert batch["boxes"].shape[0] == 4 and batch["boxes"].shape[2] == 4
        lengths = batch["boxes_lengths"]
        assert torch.equal(lengths, batch["box_labels_lengths"])
        for row, n in enumerate(lengths.tolist()):
            assert (batch["box_labels"][row, n:] == -1).all() and (batch["box_labels"][row, :n] >= 0).all()
