#!/usr/bin/env python3
"""Time the fused fast transforms against the standard PIL + float32 pipeline, per image.

    python scripts/bench_transforms.py SRC_OR_DST [--size 224] [--resize 256] [--limit 1000]
                                       [--repeats 5] [--batch 256]

SRC_OR_DST is an ImageFolder tree or a packed dataset (read with ``decode=False``). The encoded
bytes of up to ``--limit`` images, evenly spaced, are read into memory first, so only decoding
and transforming is timed, in one process with one torch thread (as in a DataLoader worker).

- standard: what torchvision's ``RandomResizedCrop + RandomHorizontalFlip + ToTensor + Normalize``
  (or ``Resize + CenterCrop + ToTensor + Normalize``) does, restated with PIL and torch: full
  decode and ``convert("RGB")``, crop, resize, flip, float32 CHW, per-image normalize; then the
  batch is stacked (default collate).
- fast: ``packer.read.transforms`` on the bytes (``uint8`` out), the uint8 batch stacked, then one
  :class:`~packer.read.transforms.Normalize` per batch (on the CPU here; on the GPU in training).

Both draw the same crops (same seed, same draws). Repetitions alternate the pipelines; the
figures are medians over repetitions, in milliseconds per image, split into what a DataLoader
worker does (transform and collate) and the batch ``Normalize`` (none for standard), with two
ratios: per worker, when ``Normalize`` runs on a GPU, and with everything on the CPU.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from PIL import Image

import packer
from packer import CenterCropResize, Normalize, RandomResizedCropFlip
from packer.read.crop_params import random_resized_crop_params
from packer.read.normalize import IMAGENET_MEAN, IMAGENET_STD

BILINEAR = Image.Resampling.BILINEAR


def load_payloads(path: str, limit: int) -> list[bytes]:
    """Encoded bytes of up to ``limit`` evenly spaced images of a tree or a packed dataset."""
    if os.path.exists(os.path.join(path, "index.json")):
        dataset = packer.open_dataset(path, decode=False)
        picks = np.linspace(0, len(dataset) - 1, min(limit, len(dataset))).round().astype(int)
        return [dataset[int(i)][0] for i in picks]
    index = packer.scan_imagefolder(path)
    picks = np.linspace(0, len(index.items) - 1, min(limit, len(index.items))).round().astype(int)
    payloads = []
    for i in picks:
        with open(index.path_of(index.items[int(i)]), "rb") as handle:
            payloads.append(handle.read())
    return payloads


def to_tensor_normalize(image: Image.Image) -> torch.Tensor:
    """torchvision's ``ToTensor`` then ``Normalize`` (not in place), restated."""
    tensor = torch.from_numpy(np.array(image, np.uint8, copy=True))
    tensor = tensor.view(image.size[1], image.size[0], 3).permute((2, 0, 1)).contiguous()
    tensor = tensor.to(dtype=torch.float32).div(255).clone()
    mean = torch.as_tensor(IMAGENET_MEAN, dtype=tensor.dtype)
    std = torch.as_tensor(IMAGENET_STD, dtype=tensor.dtype)
    if (std == 0).any():
        raise ValueError("std has a zero")
    return tensor.sub_(mean.view(-1, 1, 1)).div_(std.view(-1, 1, 1))


def standard_train(size: int) -> Callable[[bytes], torch.Tensor]:
    def run(data: bytes) -> torch.Tensor:
        image = Image.open(io.BytesIO(data)).convert("RGB")
        i, j, h, w = random_resized_crop_params(image.width, image.height)
        image = image.crop((j, i, j + w, i + h)).resize((size, size), BILINEAR)
        if torch.rand(1) < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return to_tensor_normalize(image)
    return run


def standard_eval(size: int, resize: int) -> Callable[[bytes], torch.Tensor]:
    def run(data: bytes) -> torch.Tensor:
        image = Image.open(io.BytesIO(data)).convert("RGB")
        width, height = image.size
        short, long = sorted((width, height))
        new_long = int(resize * long / short)
        new_w, new_h = (resize, new_long) if width <= height else (new_long, resize)
        image = image.resize((new_w, new_h), BILINEAR)
        top, left = round((new_h - size) / 2.0), round((new_w - size) / 2.0)
        return to_tensor_normalize(image.crop((left, top, left + size, top + size)))
    return run


def epoch(payloads: list[bytes], transform: Callable[[bytes], torch.Tensor], batch: int,
          normalize: Normalize | None) -> tuple[float, float]:
    """Seconds in the worker (transform and stack) and in the batch :class:`Normalize`."""
    torch.manual_seed(0)
    worker = normalising = 0.0
    for first in range(0, len(payloads), batch):
        started = time.perf_counter()
        images = torch.stack([transform(data) for data in payloads[first:first + batch]])
        stacked = time.perf_counter()
        if normalize is not None:
            normalize(images)
        worker += stacked - started
        normalising += time.perf_counter() - stacked
    return worker, normalising


def transform_arguments(description: str | None) -> argparse.ArgumentParser:
    """The command line of the transform benchmarks (this one and bench_opencv.py)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("path", help="an ImageFolder tree or a packed dataset")
    parser.add_argument("--size", type=int, default=224, help="output side (default 224)")
    parser.add_argument("--resize", type=int, default=256, help="evaluation short side (default 256)")
    parser.add_argument("--limit", type=int, default=1000, help="images to time (default 1000)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=256)
    return parser


def main() -> None:
    args = transform_arguments(__doc__).parse_args()

    torch.set_num_threads(1)
    payloads = load_payloads(args.path, args.limit)
    sizes = [Image.open(io.BytesIO(data)).size for data in payloads]
    n, normalize = len(payloads), Normalize()
    pipelines = {
        "train standard": (standard_train(args.size), None),
        "train fast": (RandomResizedCropFlip(args.size), normalize),
        "eval standard": (standard_eval(args.size, args.resize), None),
        "eval fast": (CenterCropResize(args.size, args.resize), normalize),
    }
    worker: dict[str, list[float]] = {name: [] for name in pipelines}
    batched: dict[str, list[float]] = {name: [] for name in pipelines}
    for rep in range(args.repeats):
        names = list(pipelines) if rep % 2 == 0 else list(reversed(pipelines))
        for name in names:
            transform, batch_normalize = pipelines[name]
            in_worker, normalising = epoch(payloads, transform, args.batch, batch_normalize)
            worker[name].append(in_worker * 1e3 / n)
            batched[name].append(normalising * 1e3 / n)

    median_w, median_h = (int(statistics.median(v)) for v in zip(*sizes, strict=True))
    print(f"{n} images from {args.path} (median {median_w}x{median_h}), output {args.size}, "
          f"batch {args.batch}, {args.repeats} interleaved repeats, 1 torch thread")
    print(f"  {'ms per image':<15} {'worker':>7} {'batch Normalize':>16} {'all on CPU':>11}")
    for name in pipelines:
        w, b = statistics.median(worker[name]), statistics.median(batched[name])
        print(f"  {name:<15} {w:7.3f} {b:16.3f} {w + b:11.3f}")
    for kind in ("train", "eval"):
        slow, fast = f"{kind} standard", f"{kind} fast"
        in_worker = statistics.median(worker[slow]) / statistics.median(worker[fast])
        on_cpu = (statistics.median(worker[slow]) + statistics.median(batched[slow])) / (
            statistics.median(worker[fast]) + statistics.median(batched[fast]))
        print(f"  {kind} speedup: {in_worker:.2f}x per worker (Normalize on a GPU), "
              f"{on_cpu:.2f}x all on the CPU")
    big = sum(min(w, h) >= 2 * args.size for w, h in sizes) / n
    print(f"  images whose short side is at least 2x the output (JPEG draft possible on the full "
          f"frame): {big:.0%}")


if __name__ == "__main__":
    main()
