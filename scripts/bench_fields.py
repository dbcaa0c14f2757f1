#!/usr/bin/env python3
"""Time detection and segmentation loading: packed fields + the joint fast path, against what
users run today on the same files (a folder and a COCO JSON or a mask folder, PIL, albumentations).

    python scripts/bench_fields.py [--images 256] [--size 512] [--workers 2] [--batch 32]
                                   [--repeats 3] [--work DIR]

Makes its own photo-like data under ``--work`` (default: a temporary folder): ``--images``
JPEGs of 640x480 with 1 to 20 boxes each (a COCO instances file, written with pycocotools'
conventions) and a palette mask each (a mask folder). Then, in one run, for each task:

- detection, baseline: a ``Dataset`` over the folder and the COCO JSON (parsed once, as
  pycocotools users do), each image opened with PIL, ``albumentations`` ``LongestMaxSize`` +
  ``PadIfNeeded`` (a letterbox to ``--size``), to a uint8 tensor; packed: ``packer convert`` of
  the COCO file, read with ``decode={"image": False}`` through ``JointLetterbox``;
- segmentation, baseline: image and mask files opened with PIL, ``albumentations``
  ``RandomScale`` + ``PadIfNeeded`` + ``RandomCrop`` + ``HorizontalFlip``; packed: ``packer.write``
  of the same images and masks, read through ``JointScaleJitterCrop``.

Both sides load through a ``DataLoader`` with ``--workers`` workers, ``--batch`` samples a batch,
the same output size and ``packer.collate_fields`` (boxes padded); repetitions alternate the
sides, and the figures are medians of samples per second, with the packed/baseline ratio.
The equal-output check: the letterbox is deterministic, so the packed boxes must equal
albumentations' within 1 px, sample for sample (the random segmentation crops draw from
different generators, so they are not compared; tests/test_joint.py holds the joint path to a
reference implementation of the same geometry). FFCV cannot follow here: its fields have fixed
shapes, and a detection sample has a varying number of boxes.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageFilter
from torch.utils.data import DataLoader, Dataset

import packer

WIDTH, HEIGHT, CLASSES = 640, 480, 8


def _photo(rng: np.random.Generator) -> Image.Image:
    """A smooth, photo-like image (blurred noise with some structure: JPEG sizes near photos)."""
    small = rng.integers(0, 256, (HEIGHT // 8, WIDTH // 8, 3), dtype=np.uint8)
    image = Image.fromarray(small).resize((WIDTH, HEIGHT), Image.Resampling.BICUBIC)
    noise = Image.fromarray(rng.integers(0, 40, (HEIGHT, WIDTH, 3), dtype=np.uint8))
    return Image.blend(image.filter(ImageFilter.GaussianBlur(2)), noise, 0.15)


def make_data(work: str, count: int) -> tuple[str, str, list[dict[str, Any]]]:
    """The images, a COCO file and a mask folder under ``work``; the write() samples' paths."""
    images_dir, masks_dir = os.path.join(work, "images"), os.path.join(work, "masks")
    os.makedirs(images_dir, exist_ok=True)
    os.makedirs(masks_dir, exist_ok=True)
    rng = np.random.default_rng(0)
    images, annotations, pairs = [], [], []
    for i in range(count):
        name = f"{i:06d}.jpg"
        _photo(rng).save(os.path.join(images_dir, name), quality=90)
        mask = np.zeros((HEIGHT, WIDTH), np.uint8)
        for _ in range(int(rng.integers(1, 21))):
            w, h = (int(v) for v in rng.integers(16, 200, 2))
            x, y = int(rng.integers(0, WIDTH - w)), int(rng.integers(0, HEIGHT - h))
            label = int(rng.integers(1, CLASSES + 1))
            mask[y:y + h, x:x + w] = label
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1, "category_id": label,
                                "bbox": [x, y, w, h], "area": float(w * h), "iscrowd": 0,
                                "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]]})
        Image.fromarray(mask, "L").save(os.path.join(masks_dir, f"{i:06d}.png"))
        images.append({"id": i + 1, "file_name": name, "width": WIDTH, "height": HEIGHT})
        pairs.append({"image": os.path.join(images_dir, name),
                      "mask": os.path.join(masks_dir, f"{i:06d}.png")})
    categories = [{"id": c, "name": f"class{c}"} for c in range(1, CLASSES + 1)]
    coco = os.path.join(work, "instances.json")
    with open(coco, "w", encoding="utf-8") as out:
        json.dump({"images": images, "annotations": annotations, "categories": categories}, out)
    return coco, images_dir, pairs


class FolderDetection(Dataset[dict[str, Any]]):
    """What detection users run today: the COCO JSON parsed once, PIL per image, albumentations."""

    def __init__(self, coco: str, images_dir: str, aug: Callable[..., Any]) -> None:
        with open(coco, encoding="utf-8") as handle:
            data = json.load(handle)
        ids = sorted(c["id"] for c in data["categories"])
        self.label = {cid: i for i, cid in enumerate(ids)}
        self.images = sorted(data["images"], key=lambda image: image["id"])
        self.boxes: dict[int, list[dict[str, Any]]] = {}
        for ann in data["annotations"]:
            self.boxes.setdefault(ann["image_id"], []).append(ann)
        self.images_dir, self.aug = images_dir, aug

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> dict[str, Any]:
        entry = self.images[i]
        with Image.open(os.path.join(self.images_dir, entry["file_name"])) as image:
            pixels = np.asarray(image.convert("RGB"))
        anns = self.boxes.get(entry["id"], [])
        out = self.aug(image=pixels, bboxes=np.array([a["bbox"] for a in anns], np.float32).reshape(-1, 4),
                       box_labels=np.array([self.label[a["category_id"]] for a in anns], np.int64))
        return {"image": torch.from_numpy(out["image"]).permute(2, 0, 1),
                "boxes": torch.as_tensor(np.asarray(out["bboxes"], np.float32).reshape(-1, 4)),
                "box_labels": torch.as_tensor(np.asarray(out["box_labels"], np.int64))}


class FolderSegmentation(Dataset[dict[str, Any]]):
    """What segmentation users run today: image and mask files, PIL, albumentations."""

    def __init__(self, pairs: list[dict[str, Any]], aug: Callable[..., Any]) -> None:
        self.pairs, self.aug = pairs, aug

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> dict[str, Any]:
        with Image.open(self.pairs[i]["image"]) as image, Image.open(self.pairs[i]["mask"]) as mask:
            out = self.aug(image=np.asarray(image.convert("RGB")), mask=np.asarray(mask))
        return {"image": torch.from_numpy(out["image"]).permute(2, 0, 1),
                "mask": torch.from_numpy(out["mask"])}


def _samples(pairs: list[dict[str, Any]]) -> Any:
    for pair in pairs:
        with open(pair["image"], "rb") as handle:
            image = handle.read()
        with Image.open(pair["mask"]) as mask:
            yield {"__key__": os.path.basename(pair["image"]), "image": image, "mask": np.asarray(mask)}


def _rate(dataset: Dataset[Any], args: argparse.Namespace, pad: dict[str, float]) -> float:
    collate = functools.partial(packer.collate_fields, pad=pad)
    loader = DataLoader(dataset, batch_size=args.batch, num_workers=args.workers, collate_fn=collate,
                        shuffle=True, generator=torch.Generator().manual_seed(0))
    started = time.perf_counter()
    count = sum(len(batch["image"]) for batch in loader)
    return count / (time.perf_counter() - started)


def _equal_boxes(packed: Dataset[Any], folder: FolderDetection, count: int) -> int:
    """How many of the first ``count`` samples have the same boxes and labels (1 px) both ways."""
    same = 0
    for i in range(count):
        ours, theirs = packed[i], folder[i]
        if (ours["boxes"].shape == theirs["boxes"].shape
                and torch.equal(ours["box_labels"], theirs["box_labels"])
                and torch.allclose(ours["boxes"], theirs["boxes"], atol=1.0)):
            same += 1
    return same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", default=None)
    args = parser.parse_args()
    try:
        import albumentations as A  # noqa: N812 (its users' name)
    except ImportError:
        raise SystemExit("bench_fields needs albumentations (the baseline): "
                         "pip install albumentations") from None
    work = args.work or tempfile.mkdtemp(prefix="bench-fields-")
    coco, images_dir, pairs = make_data(work, args.images)
    size, pad = args.size, A.PadIfNeeded(args.size, args.size, position="center", border_mode=0, fill=114)
    letterbox = A.Compose([A.LongestMaxSize(size), pad],
                          bbox_params=A.BboxParams(format="coco", label_fields=["box_labels"]))
    jitter = A.Compose([A.RandomScale((-0.5, 1.0)),
                        A.PadIfNeeded(size, size, border_mode=0, fill=0, fill_mask=255),
                        A.RandomCrop(size, size), A.HorizontalFlip()])
    det_dst, seg_dst = os.path.join(work, "det.packer"), os.path.join(work, "seg.packer")
    packer.convert(coco, det_dst, to="lmdb", root=images_dir, overwrite=True)
    schema = [{"name": "image", "type": "image"},
              {"name": "mask", "type": "mask",
               "params": {"image": "image", "classes": [f"c{c}" for c in range(CLASSES + 1)]}}]
    packer.write(seg_dst, _samples(pairs), schema, to="lmdb", overwrite=True)
    det = packer.open_dataset(det_dst, decode={"image": False}, fields=("image", "boxes", "box_labels"))
    det.transform = packer.JointLetterbox.for_schema(det.schema, size)
    seg = packer.open_dataset(seg_dst, decode={"image": False})
    seg.transform = packer.JointScaleJitterCrop.for_schema(seg.schema, size)
    folder_det = FolderDetection(coco, images_dir, letterbox)
    boxes_pad = {"boxes": 0, "box_labels": -1}
    sides = {"detection": (folder_det, det, boxes_pad),
             "segmentation": (FolderSegmentation(pairs, jitter), seg, {})}
    print(f"{args.images} images of {WIDTH}x{HEIGHT}, output {size}x{size}, {args.workers} workers, "
          f"batch {args.batch}, {args.repeats} interleaved repeats (samples/s, median)")
    for task, (baseline, packed, pad) in sides.items():
        rates: dict[str, list[float]] = {"folder + albumentations": [], "packed + joint": []}
        for _ in range(args.repeats):
            rates["folder + albumentations"].append(_rate(baseline, args, pad))
            rates["packed + joint"].append(_rate(packed, args, pad))
        medians = {name: statistics.median(values) for name, values in rates.items()}
        ratio = medians["packed + joint"] / medians["folder + albumentations"]
        print(f"  {task:<13} folder + albumentations {medians['folder + albumentations']:8.1f}   "
              f"packed + joint {medians['packed + joint']:8.1f}   ratio {ratio:.2f}x")
    checked = min(32, args.images)
    print(f"equal output (detection letterbox, boxes within 1 px and labels): "
          f"{_equal_boxes(det, folder_det, checked)} of {checked} samples")


if __name__ == "__main__":
    main()
