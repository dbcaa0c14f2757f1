#!/usr/bin/env python3
"""Time detection and segmentation loading: packed fields + the joint fast path, against what
users run today on the same files (a folder and a COCO JSON or a mask folder, PIL, albumentations).

    python scripts/bench_fields.py [--images 256] [--size 512] [--workers 2] [--batch 32]
                                   [--repeats 3] [--work DIR] [--slowfs PATH/TO/slowfs.py]

Makes its own photo-like data under ``--work`` (default: a temporary folder): ``--images``
JPEGs of 640x480 with 1 to 20 boxes each (a COCO instances file, written with pycocotools'
conventions) and a palette mask each (a mask folder). Then, in one run, for each task:

- detection, baseline ("folder"): a ``Dataset`` over the folder and the COCO JSON (parsed once,
  as pycocotools users do), each image opened with PIL, ``albumentations`` ``LongestMaxSize`` +
  ``PadIfNeeded`` (a letterbox to ``--size``), to a uint8 tensor; packed: ``packer convert`` of
  the COCO file, read with ``decode={"image": False}`` through ``JointLetterbox``;
- segmentation, baseline: image and mask files opened with PIL, ``albumentations``
  ``RandomScale`` + ``PadIfNeeded`` + ``RandomCrop`` + ``HorizontalFlip``; packed: ``packer.write``
  of the same images and masks, read through ``JointScaleJitterCrop``.

Each packed dataset is written twice: with the ``original`` codec (the JPEG bytes as they are,
the same bytes on disk as the folder) and with ``pixels`` (decoded RGB at full size: no decode
when reading, about 11x the bytes); the bytes of each against the folder's are printed. Every
side loads through a ``DataLoader`` with ``--workers`` workers, ``--batch`` samples a batch, the
same output size and ``packer.collate_fields`` (boxes padded); repetitions alternate the sides,
and the figures are medians of samples per second, with each packed side's ratio to the folder.
With ``--slowfs`` every side is timed again reading from a slowfs mount of the work folder
(0.5 ms a metadata round trip, 0.2 ms a read, 1000 MB/s: a cluster's shared storage), where
the folder pays its opens and stats per image and mask file.

The equal-output check: the letterbox is deterministic, so the packed boxes must equal
albumentations' within 1 px, sample for sample (the random segmentation crops draw from
different generators, so they are not compared; tests/test_joint.py holds the joint path to a
reference implementation of the same geometry). FFCV cannot follow here: its fields have fixed
shapes, and a detection sample has a varying number of boxes.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from bench_read import load_slowfs  # scripts/ is on the path of a script run from it
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


SLOWFS_PROFILE = {"meta_latency_ms": 0.5, "read_latency_ms": 0.2, "bandwidth_mbs": 1000.0}
CODECS = ("original", "pixels")


def _packed(work: str, coco: str, images_dir: str, pairs: list[dict[str, Any]]) -> None:
    """The packed datasets under ``work``: detection (convert the COCO file) and segmentation
    (write the image and mask pairs), once per image codec."""
    schema = [{"name": "image", "type": "image"},
              {"name": "mask", "type": "mask",
               "params": {"image": "image", "classes": [f"c{c}" for c in range(CLASSES + 1)]}}]
    for codec in CODECS:
        packer.convert(coco, os.path.join(work, f"det-{codec}.packer"), to="lmdb", root=images_dir,
                       codec=codec, overwrite=True)
        packer.write(os.path.join(work, f"seg-{codec}.packer"), _samples(pairs), schema, to="lmdb",
                     codec=codec, overwrite=True)


def _tree_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, name))
               for folder, _, names in os.walk(path) for name in names)


def _sides(base: str, size: int, aug: Any) -> dict[str, dict[str, Dataset[Any]]]:
    """Every dataset of the run, reading from ``base`` (the work folder or its slowfs mount)."""
    images_dir = os.path.join(base, "images")
    pairs = [{"image": os.path.join(images_dir, name),
              "mask": os.path.join(base, "masks", name.replace(".jpg", ".png"))}
             for name in sorted(os.listdir(images_dir))]
    detection: dict[str, Dataset[Any]] = {
        "folder": FolderDetection(os.path.join(base, "instances.json"), images_dir, aug["letterbox"])}
    segmentation: dict[str, Dataset[Any]] = {"folder": FolderSegmentation(pairs, aug["jitter"])}
    for codec in CODECS:
        det = packer.open_dataset(os.path.join(base, f"det-{codec}.packer"), decode={"image": False},
                                  fields=("image", "boxes", "box_labels"))
        det.transform = packer.JointLetterbox.for_schema(det.schema, size)
        seg = packer.open_dataset(os.path.join(base, f"seg-{codec}.packer"), decode={"image": False})
        seg.transform = packer.JointScaleJitterCrop.for_schema(seg.schema, size)
        detection[codec], segmentation[codec] = det, seg
    return {"detection": detection, "segmentation": segmentation}


@contextlib.contextmanager
def _storages(work: str, slowfs: str | None) -> Iterator[Iterator[tuple[str, str]]]:
    """``(name, base folder)`` of each storage the run reads from: the local disk, and the
    work folder mounted through slowfs (shared-storage round trips) with ``--slowfs``."""
    with contextlib.ExitStack() as stack:
        bases = [("local disk", work)]
        if slowfs is not None:
            mount = load_slowfs(slowfs).mounted(work, **SLOWFS_PROFILE)
            bases.append(("slowfs", stack.enter_context(mount)))
        yield iter(bases)


def _augmentations(size: int) -> dict[str, Any]:
    try:
        import albumentations as A  # noqa: N812 (its users' name)
    except ImportError:
        raise SystemExit("bench_fields needs albumentations (the baseline): "
                         "pip install albumentations") from None
    pad = A.PadIfNeeded(size, size, position="center", border_mode=0, fill=114)
    return {"letterbox": A.Compose([A.LongestMaxSize(size), pad],
                                   bbox_params=A.BboxParams(format="coco", label_fields=["box_labels"])),
            "jitter": A.Compose([A.RandomScale((-0.5, 1.0)),
                                 A.PadIfNeeded(size, size, border_mode=0, fill=0, fill_mask=255),
                                 A.RandomCrop(size, size), A.HorizontalFlip()])}


def _report(storage: str, sides: dict[str, dict[str, Dataset[Any]]], args: argparse.Namespace) -> None:
    pads: dict[str, dict[str, float]] = {"detection": {"boxes": 0, "box_labels": -1}, "segmentation": {}}
    for task, datasets in sides.items():
        rates: dict[str, list[float]] = {name: [] for name in datasets}
        for _ in range(args.repeats):
            for name, dataset in datasets.items():
                rates[name].append(_rate(dataset, args, pads[task]))
        medians = {name: statistics.median(values) for name, values in rates.items()}
        cells = "   ".join(f"{name} {medians[name]:7.1f} ({medians[name] / medians['folder']:.2f}x)"
                           for name in CODECS)
        print(f"  {storage:<10} {task:<13} folder {medians['folder']:7.1f}   {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", default=None)
    parser.add_argument("--slowfs", default=None, metavar="PATH/TO/slowfs.py",
                        help="also read everything through a slowfs mount (shared-storage round trips)")
    args = parser.parse_args()
    aug = _augmentations(args.size)
    work = args.work or tempfile.mkdtemp(prefix="bench-fields-")
    coco, images_dir, pairs = make_data(work, args.images)
    _packed(work, coco, images_dir, pairs)
    folder_bytes = _tree_bytes(images_dir) + os.path.getsize(coco)
    sizes = "   ".join(f"{codec} {_tree_bytes(os.path.join(work, f'det-{codec}.packer')) / folder_bytes:.2f}x"
                       for codec in CODECS)
    print(f"{args.images} images of {WIDTH}x{HEIGHT}, output {args.size}x{args.size}, {args.workers} "
          f"workers, batch {args.batch}, {args.repeats} interleaved repeats (samples/s, median; ratio "
          "to the folder)")
    print(f"detection datasets' bytes on disk against the JPEGs + COCO file: {sizes}")
    with _storages(work, args.slowfs) as storages:
        for storage, base in storages:
            sides = _sides(base, args.size, aug)
            _report(storage, sides, args)
    sides = _sides(work, args.size, aug)
    checked = min(32, args.images)
    folder = sides["detection"]["folder"]
    assert isinstance(folder, FolderDetection)
    print(f"equal output (detection letterbox, boxes within 1 px and labels): "
          f"{_equal_boxes(sides['detection']['original'], folder, checked)} of {checked} samples")


if __name__ == "__main__":
    main()
