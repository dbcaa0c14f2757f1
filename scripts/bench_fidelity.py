#!/usr/bin/env python3
"""How close the fast path's crops are to torchvision's: MAD and PSNR on real images.

Usage::

    python scripts/bench_fidelity.py SRC [--limit 500] [--size 224] [--seed 0] [--json]
    python scripts/bench_fidelity.py --packed DST [--limit 500] ...

For each image of an ImageFolder tree SRC (or each record of a packed dataset DST: then the
reference works on the stored image as ``decode=True`` gives it), one crop box is drawn as
torchvision's ``RandomResizedCrop`` draws it (seeded) and every second image is mirrored. The
reference is torchvision's ``RandomResizedCrop`` + ``RandomHorizontalFlip`` on the PIL image
(``resized_crop`` then ``hflip``) when torchvision is importable, else the same operations
restated with PIL (crop, bilinear resize, mirror: what torchvision runs on PIL images). Each
fast-path setting then crops the stored bytes with that box and flip
(:func:`packer.read.transforms.crop_resize`), and the script prints, per setting, the mean absolute
difference (levels of 0-255), the PSNR of the pooled squared error, and the 1st percentile of
the per-image PSNRs (the worst images).

Settings: the default (``auto``: simplejpeg and OpenCV when installed, ``draft_gap=2``), the
torch and Pillow resamplers, ``draft_gap=1`` (faster on large JPEGs), and Pillow decoding with
torch resizing (what an install without ``packer[fast]`` runs).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
from collections.abc import Iterator

import numpy as np
import torch
from PIL import Image

import packer
from packer import ImageFolderDataset
from packer.format.codecs import pixels_array
from packer.read.crop_params import random_resized_crop_params
from packer.read.crop_resize import crop_resize

SETTINGS = {
    "default (auto)": {},
    "resampler=torch": {"resampler": "torch"},
    "resampler=pil": {"resampler": "pil"},
    "draft_gap=1": {"draft_gap": 1.0},
    "no fast extra (pil decode, torch resize)": {"decoder": "pil", "resampler": "torch"},
}


def as_image(data: bytes) -> Image.Image:
    """The RGB image ``decode=True`` gives for a stored record (or ImageFolder for a file)."""
    array = pixels_array(data)
    if array is not None:
        return Image.fromarray(array, "RGB")
    return Image.open(io.BytesIO(data)).convert("RGB")


def reference(image: Image.Image, box: tuple[int, int, int, int], size: int, flip: bool) -> np.ndarray:
    """torchvision's RandomResizedCrop + flip of ``image`` on this box (its own code if present)."""
    top, left, height, width = box
    try:
        import torchvision.transforms.functional as F  # noqa: N812
    except ImportError:
        cropped = image.crop((left, top, left + width, top + height))
        cropped = cropped.resize((size, size), Image.Resampling.BILINEAR)
        return np.asarray(cropped.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if flip else cropped)
    cropped = F.resized_crop(image, top, left, height, width, [size, size],
                             F.InterpolationMode.BILINEAR, antialias=True)
    return np.asarray(F.hflip(cropped) if flip else cropped)


def samples(args: argparse.Namespace) -> Iterator[bytes]:
    if args.packed:
        dataset = packer.open_dataset(args.packed, decode=False)
    else:
        dataset = ImageFolderDataset(args.src, decode=False)
    count = len(dataset)
    order = torch.randperm(count, generator=torch.Generator().manual_seed(args.seed))[:args.limit]
    for index in sorted(order.tolist()):
        yield bytes(dataset[index][0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", nargs="?", help="an ImageFolder tree")
    parser.add_argument("--packed", help="a packed dataset instead (its stored records)")
    parser.add_argument("--limit", type=int, default=500)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if bool(args.src) == bool(args.packed):
        parser.error("give SRC or --packed DST")
    generator = torch.Generator().manual_seed(args.seed)
    errors: dict[str, list[np.ndarray]] = {name: [] for name in SETTINGS}
    for number, data in enumerate(samples(args)):
        image = as_image(data)
        box = random_resized_crop_params(*image.size, generator=generator)
        flip = number % 2 == 1
        expected = reference(image, box, args.size, flip).astype(np.float64)
        pil_box = (box[1], box[0], box[1] + box[3], box[0] + box[2])
        for name, options in SETTINGS.items():
            got = crop_resize(data, pil_box, args.size, flip=flip, **options)
            errors[name].append(got.permute(1, 2, 0).numpy().astype(np.float64) - expected)
    results = {}
    for name, found in errors.items():
        stack = np.stack(found)
        per_image = [10 * math.log10(255 ** 2 / max(float((e ** 2).mean()), 1e-12)) for e in found]
        results[name] = {"mad": float(np.abs(stack).mean()),
                         "psnr": 10 * math.log10(255 ** 2 / max(float((stack ** 2).mean()), 1e-12)),
                         "psnr_p1": float(np.percentile(per_image, 1)), "images": len(found)}
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
        return 0
    source = args.packed or args.src
    print(f"fast path vs torchvision RandomResizedCrop({args.size}) + flip, same boxes, {len(found)} "
          f"images of {source}")
    print("| setting | MAD (levels) | PSNR (dB) | worst 1% PSNR (dB) |\n|---|---|---|---|")
    for name, figures in results.items():
        print(f"| {name} | {figures['mad']:.2f} | {figures['psnr']:.1f} | {figures['psnr_p1']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
