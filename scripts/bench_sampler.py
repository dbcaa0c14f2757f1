#!/usr/bin/env python3
"""Cold-read benchmark: global random order against ShardAwareSampler's block order.

Usage::

    python scripts/bench_sampler.py DST [--epochs 3] [--workers 2] [--batch-size 64]
        [--block-size 64] [--window 16] [--limit N] [--json]

DST is any packed dataset; make one from an ImageFolder tree with
``packer convert SRC DST --to lmdb`` (or ``--to hdf5``).

Each side reads the stored bytes only (``decode=False``; the collate function sums their
lengths), so the figure is storage and Python overhead, not decoding:

* ``random``: ``torch.utils.data.RandomSampler``, every sample from a random place;
* ``block``: :class:`packer.read.samplers.ShardAwareSampler` (``--block-size``, ``--window``).

Before every timed epoch every file of DST is dropped from the page cache with
``posix_fadvise(POSIX_FADV_DONTNEED)`` (Linux; files another process keeps mapped or dirty
stay cached, so nothing else should read DST meanwhile), and each epoch uses a fresh
DataLoader so that no worker keeps a shard mapped. The sides alternate, and which goes first
alternates too, so machine noise hits both; each epoch uses a new order (epoch seed). Figures
are medians with min-max; ``speedup`` is block images/s over random images/s. ``--limit N``
reads only the first N samples of each order (the same count on both sides) to keep large
datasets quick. On a local SSD expect little difference; on a spinning disk, NFS or Lustre,
the block order is where it pays.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from bench_read import load_slowfs  # scripts/ is on the path of a script run from it
from torch.utils.data import DataLoader, RandomSampler

import packer
from packer import ShardAwareSampler


def count_bytes(batch: list[tuple[bytes, int]]) -> int:
    return sum(len(sample) for sample, _ in batch)


class First:
    """The first ``limit`` indices of a sampler (a sampler for DataLoader: iterable with a length)."""

    def __init__(self, sampler: Iterable[int], length: int, limit: int) -> None:
        self.sampler, self.length = sampler, min(length, limit)

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[int]:
        for count, index in enumerate(self.sampler):
            if count == self.length:
                return
            yield index


def drop_cache(root: str) -> None:
    for folder, _, names in os.walk(root):
        for name in names:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def sampler_for(side: str, dataset: Any, epoch: int, args: argparse.Namespace) -> First:
    if side == "random":
        generator = torch.Generator()
        generator.manual_seed(epoch)
        return First(RandomSampler(dataset, generator=generator), len(dataset), args.limit)
    sampler = ShardAwareSampler(dataset, num_replicas=1, rank=0, seed=0, block_size=args.block_size,
                                window=args.window)
    sampler.set_epoch(epoch)
    return First(sampler, len(sampler), args.limit)


def timed_epoch(side: str, dataset: Any, epoch: int, args: argparse.Namespace) -> tuple[float, int, int]:
    """Seconds, samples and bytes of one cold epoch of ``side``."""
    sampler = sampler_for(side, dataset, epoch, args)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                        collate_fn=count_bytes)
    dataset.close()  # no handle of the main process keeps pages mapped
    drop_cache(dataset.root)
    start = time.perf_counter()
    total = sum(loader)
    seconds = time.perf_counter() - start
    dataset.close()
    return seconds, len(sampler), total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dst", help="a packed dataset (the DST of `packer convert`)")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per side (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--limit", type=int, default=None, help="samples per epoch (default: all)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--slowfs", default=None,
                        help="path to the project's slowfs.py: read DST through it as emulated shared "
                             "storage (0.5 ms per metadata round trip, 0.2 ms per read, 1000 MB/s)")
    args = parser.parse_args(argv)
    if args.slowfs is None:
        return run(args)
    slowfs = load_slowfs(args.slowfs)
    with slowfs.mounted(os.path.abspath(args.dst), meta_latency_ms=0.5, read_latency_ms=0.2,
                        bandwidth_mbs=1000.0) as mounted:
        args.dst = mounted
        return run(args)


def run(args: argparse.Namespace) -> int:
    """Time the two orders, alternating; print the report."""
    if not hasattr(os, "posix_fadvise"):
        print("posix_fadvise is not available here: cannot drop the page cache.", file=sys.stderr)
        return 2
    args.limit = args.limit if args.limit is not None else sys.maxsize
    dataset = packer.open_dataset(args.dst, decode=False)
    sides = ("random", "block")
    seconds: dict[str, list[float]] = {side: [] for side in sides}
    samples = megabytes = 0.0
    for epoch in range(args.epochs):
        for side in sides if epoch % 2 == 0 else sides[::-1]:
            took, samples, total = timed_epoch(side, dataset, epoch, args)
            seconds[side].append(took)
            megabytes = total / 1e6
    report: dict[str, Any] = {
        "dst": os.path.abspath(args.dst), "backend": dataset.manifest.backend,
        "shards": len(dataset.manifest.shards), "samples_per_epoch": int(samples),
        "megabytes_per_epoch": round(megabytes, 1), "workers": args.workers,
        "batch_size": args.batch_size, "block_size": args.block_size, "window": args.window,
        "epochs": args.epochs, "slowfs": bool(args.slowfs), "sides": {},
    }
    for side in sides:
        median = statistics.median(seconds[side])
        report["sides"][side] = {"median_s": round(median, 3), "min_s": round(min(seconds[side]), 3),
                                 "max_s": round(max(seconds[side]), 3),
                                 "images_per_s": round(samples / median, 1),
                                 "mb_per_s": round(megabytes / median, 1)}
    report["speedup"] = round(statistics.median(seconds["random"]) / statistics.median(seconds["block"]), 2)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    where = "through slowfs (emulated shared storage), " if args.slowfs else ""
    print(f"{report['dst']}: {report['backend']}, {report['shards']} shard(s), {int(samples)} samples "
          f"({megabytes:.1f} MB) per epoch, {where}cold cache, {args.workers} workers, "
          f"batch {args.batch_size}")
    for side in sides:
        row = report["sides"][side]
        print(f"  {side:>6}: {row['median_s']:7.2f} s (min {row['min_s']:.2f}, max {row['max_s']:.2f})  "
              f"{row['images_per_s']:9.1f} img/s  {row['mb_per_s']:7.1f} MB/s")
    print(f"  block order (block {args.block_size} x window {args.window}) / random: "
          f"{report['speedup']:.2f}x images/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
