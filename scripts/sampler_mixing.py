#!/usr/bin/env python3
"""What a cache-sized shuffle costs in randomness: the classes within batches, per sampler.

    python scripts/sampler_mixing.py [--classes 1000] [--per-class 1281] [--shard-samples 9000]
                                     [--batch 256] [--windows 0.1 0.05 0.02] [--epochs 2] [--json]

A dataset in ImageFolder order (class after class, ``--per-class`` samples each, ImageNet's
shape by default) cut into shards of ``--shard-samples`` (about 1 GiB of ImageNet JPEGs), then
for each sampler, over ``--epochs`` epochs: the mean number of distinct classes in a batch of
``--batch``, and the batches' mean label entropy as a fraction of a uniform shuffle's (1.0: as
mixed as a uniform shuffle; 0: one class per batch). Samplers: ``RandomSampler`` (uniform, the
reference), ``ShardAwareSampler`` (blocks of 64 in windows of 16, permuted over the whole
dataset: a cache must hold it all), and ``ShardWindowSampler`` with windows of each ``--windows``
fraction of the dataset (the cache it needs: a window being read and the next; make_loader uses
a quarter of the cache's bound). No data is read: the labels follow from the layout.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from collections.abc import Iterable

import torch

import packer
from packer.read.samplers import SeededRandomSampler


def batch_mixing(order: Iterable[int], labels: torch.Tensor, batch: int) -> tuple[float, float]:
    """Mean distinct classes per full batch, and mean label entropy (nats) per batch."""
    indices = torch.as_tensor(list(order), dtype=torch.int64)
    whole = len(indices) // batch * batch
    distinct, entropy = 0.0, 0.0
    for chunk in labels[indices[:whole]].view(-1, batch):
        counts = torch.as_tensor(list(Counter(chunk.tolist()).values()), dtype=torch.float64)
        p = counts / batch
        distinct += len(counts)
        entropy += float(-(p * p.log()).sum())
    batches = max(1, whole // batch)
    return distinct / batches, entropy / batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--per-class", type=int, default=1281)
    parser.add_argument("--shard-samples", type=int, default=9000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--windows", type=float, nargs="+", default=[0.1, 0.05, 0.02])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    total = args.classes * args.per_class
    labels = torch.arange(total, dtype=torch.int64) // args.per_class
    sizes = [min(args.shard_samples, total - start) for start in range(0, total, args.shard_samples)]
    samplers: dict[str, object] = {
        "RandomSampler (uniform)": SeededRandomSampler(range(total), seed=0),
        "ShardAwareSampler 64 x 16": packer.ShardAwareSampler(sizes, seed=0),
    }
    for fraction in args.windows:
        shards = max(1, round(fraction * len(sizes)))
        samplers[f"ShardWindowSampler, window {fraction:g} ({shards} shards)"] = packer.ShardWindowSampler(
            sizes, window_shards=shards, seed=0)
    rows = {}
    for name, sampler in samplers.items():
        distinct, entropy = [], []
        for epoch in range(args.epochs):
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(epoch)  # type: ignore[attr-defined]
            d, e = batch_mixing(sampler, labels, args.batch)  # type: ignore[arg-type]
            distinct.append(d)
            entropy.append(e)
        rows[name] = (sum(distinct) / len(distinct), sum(entropy) / len(entropy))
    reference = rows["RandomSampler (uniform)"][1]
    print(f"{total} samples, {args.classes} classes in ImageFolder order, {len(sizes)} shards of "
          f"{args.shard_samples}, batches of {args.batch}, {args.epochs} epochs")
    print(f"{'sampler':<48} {'classes per batch':>18} {'entropy vs uniform':>19}")
    for name, (distinct, entropy) in rows.items():
        print(f"{name:<48} {distinct:>18.1f} {entropy / reference:>19.3f}")
    print(f"(a batch of {args.batch} from {args.classes} classes, uniformly: at most "
          f"{min(args.batch, args.classes)} classes, entropy <= ln {min(args.batch, args.classes)} = "
          f"{math.log(min(args.batch, args.classes)):.2f})")
    if args.json:
        print(json.dumps({name: {"classes_per_batch": d, "entropy_vs_uniform": e / reference}
                          for name, (d, e) in rows.items()}, indent=2))


if __name__ == "__main__":
    main()
