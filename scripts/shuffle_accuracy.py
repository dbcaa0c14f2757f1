#!/usr/bin/env python3
"""What a cache-sized shuffle costs in accuracy: a short training run per sampler, same data.

    python scripts/shuffle_accuracy.py [--classes 20] [--per-class 150] [--epochs 4]
                                       [--windows 0.1 0.05] [--seeds 3] [--root DIR]

A small synthetic classification task (each class a random 8x8 colour pattern, drawn at 32x32
with a random shift and heavy noise, as PNGs in an ImageFolder tree, so nothing is downloaded),
converted to LMDB in ImageFolder order (class after class) with shards of about a third of a
class. The same small convolutional network is trained for ``--epochs`` epochs with plain SGD
from the same initial weights, once per sampler and seed: a uniform shuffle
(``SeededRandomSampler``, the reference) and ``ShardWindowSampler`` with windows of each
``--windows`` fraction of the dataset (what ``make_loader`` picks for a cache four times that
size); then its accuracy on a held-out test tree. Reported: mean and range over ``--seeds``.
A window holds about that fraction of the classes, as on ImageNet in ImageFolder order, so the
figures say how much a short run suffers from batches drawn from a few classes at a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Sampler

import packer
from packer.read.samplers import SeededRandomSampler


def make_tree(root: str, classes: int, per_class: int, seed: int) -> None:
    """``classes`` folders of ``per_class`` noisy 32x32 PNGs drawn from per-class patterns."""
    patterns = np.random.default_rng(0).uniform(0, 255, size=(classes, 8, 8, 3))
    rng = np.random.default_rng(seed)
    for label in range(classes):
        folder = os.path.join(root, f"class{label:03d}")
        os.makedirs(folder, exist_ok=True)
        big = np.kron(patterns[label], np.ones((5, 5, 1)))  # 40x40, cropped at a random shift
        for index in range(per_class):
            dy, dx = rng.integers(0, 9, size=2)
            image = big[dy:dy + 32, dx:dx + 32] + rng.normal(0, 90, size=(32, 32, 3))
            Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(
                os.path.join(folder, f"{index:05d}.png"))


def to_tensor(image: Image.Image) -> torch.Tensor:
    """A PIL image as a float CHW tensor in [0, 1] (a plain callable: no torchvision)."""
    return torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)


def network(classes: int) -> torch.nn.Module:
    """A small CNN: two conv blocks and a linear head."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
        torch.nn.Flatten(), torch.nn.Linear(32 * 16, classes))


def train_and_test(train: Any, test: Any, sampler: Sampler[int], args: argparse.Namespace,
                   seed: int) -> float:
    """Test accuracy after ``args.epochs`` epochs over ``train`` in ``sampler``'s order."""
    torch.manual_seed(seed)
    model = network(len(train.classes))
    optimiser = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loader = DataLoader(train, batch_size=args.batch, sampler=sampler, drop_last=True)
    for epoch in range(args.epochs):
        getattr(sampler, "set_epoch", lambda _: None)(epoch)
        model.train()
        for images, labels in loader:
            optimiser.zero_grad()
            torch.nn.functional.cross_entropy(model(images), labels).backward()
            optimiser.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for images, labels in DataLoader(test, batch_size=256):
            correct += int((model(images).argmax(1) == labels).sum())
    return correct / len(test)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=20)
    parser.add_argument("--per-class", type=int, default=150)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--windows", type=float, nargs="+", default=[0.1, 0.05])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--root", help="working directory (default: temporary)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = args.root or tempfile.mkdtemp(prefix="shuffle_accuracy_")
    shape = f"{args.classes}x{args.per_class}"
    trees = {name: os.path.join(root, f"{name}-{shape}") for name in ("train", "test")}
    for name, tree in trees.items():
        if not os.path.isdir(tree):
            make_tree(tree, args.classes, args.per_class if name == "train" else args.per_class // 3,
                      seed=1 if name == "train" else 2)
    packed = os.path.join(root, f"lmdb-{args.classes}x{args.per_class}")
    if not os.path.exists(os.path.join(packed, "index.json")):
        first = os.path.join(trees["train"], "class000")
        class_bytes = sum(entry.stat().st_size for entry in os.scandir(first))
        packer.convert(trees["train"], packed, to="lmdb", shard_size=max(4096, class_bytes // 3),
                       overwrite=True)
    train = packer.open_dataset(packed, transform=to_tensor)
    test_packed = os.path.join(root, f"test-lmdb-{args.classes}x{args.per_class}")
    if not os.path.exists(os.path.join(test_packed, "index.json")):
        packer.convert(trees["test"], test_packed, to="lmdb", overwrite=True)
    test = packer.open_dataset(test_packed, transform=to_tensor)
    total = train.manifest.num_bytes
    samplers: dict[str, Callable[[int], Sampler[int]]] = {
        "uniform (SeededRandomSampler)": lambda seed: SeededRandomSampler(train, seed=seed)}
    for fraction in args.windows:
        samplers[f"ShardWindowSampler, windows of {fraction:g}"] = (
            lambda seed, fraction=fraction: packer.ShardWindowSampler(
                train, num_replicas=1, rank=0, seed=seed, window_bytes=max(1, int(total * fraction))))
    print(f"{len(train)} training images in {len(train.manifest.shards)} shards, {args.classes} classes; "
          f"{len(test)} test images; {args.epochs} epochs, batch {args.batch}, {args.seeds} seeds")
    print("| sampler | test accuracy (mean) | range |\n|---|---|---|")
    for name, make in samplers.items():
        scores = [train_and_test(train, test, make(seed), args, seed) for seed in range(args.seeds)]
        print(f"| {name} | {statistics.mean(scores):.3f} | {min(scores):.3f}-{max(scores):.3f} |", flush=True)


if __name__ == "__main__":
    main()
