"""Train a small classifier from a packed dataset: the README's training snippet, runnable.

    packer demo /tmp/packer-demo                       # makes /tmp/packer-demo/lmdb
    python examples/train_minimal.py /tmp/packer-demo/lmdb --epochs 1
    python examples/train_minimal.py s3://bucket/train --cache-limit 50GB   # after packer push

A URL is read through the node's cache (--cache-dir, default $PACKER_CACHE or
$XDG_CACHE_HOME/packer), bounded by --cache-limit for this process.

Uses only torch and PIL (no torchvision): the transform is a plain callable. On a machine with
CUDA the batches are pinned and moved to the GPU.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader

import packer


class ResizeToTensor:
    """PIL image -> float tensor CHW in [0, 1], resized to a square; any callable works."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, image: Image.Image) -> torch.Tensor:
        image = image.resize((self.size, self.size), Image.Resampling.BILINEAR)
        return torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1).float() / 255


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("dataset", help="a packed dataset: DST of packer convert (or packer demo DIR's "
                        "lmdb/hdf5), or its URL after packer push (s3://, gs://, az://, https://)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--cache-dir", default=None, help="for a URL: the node cache's directory")
    parser.add_argument("--cache-limit", default=None,
                        help="for a URL: the most the cache may hold, e.g. 50GB "
                             "(default: a free-space floor only)")
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset = packer.open_dataset(args.dataset, transform=ResizeToTensor(args.size),
                                  cache_dir=args.cache_dir, cache_limit=args.cache_limit)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, prefetch_factor=2 if args.workers else None,
                        pin_memory=device.type == "cuda", persistent_workers=args.workers > 0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, len(dataset.classes)),
    ).to(device)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    print(f"{dataset}; classes {dataset.classes}")
    for epoch in range(args.epochs):
        started, seen, correct, total_loss = time.perf_counter(), 0, 0, 0.0
        for images, targets in loader:
            images = images.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            logits = model(images)
            loss = loss_fn(logits, targets)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            seen += len(targets)
            correct += int((logits.argmax(1) == targets).sum())
            total_loss += loss.item() * len(targets)
        seconds = time.perf_counter() - started
        print(f"epoch {epoch}: loss {total_loss / seen:.3f}, train accuracy {correct / seen:.2%}, "
              f"{seen / seconds:.0f} images/s")


if __name__ == "__main__":
    main()
