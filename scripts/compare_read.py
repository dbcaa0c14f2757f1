#!/usr/bin/env python3
"""Read an ImageFolder tree and its packed dataset the same way, and report the ratio.

    python scripts/compare_read.py SRC DST [--workers 2] [--batch-size 64] [--repeats 5] [--no-decode]

Both go through ``DataLoader(num_workers=..., batch_size=...)`` in ImageFolder order with the
same per-sample work (decode to RGB, or raw bytes with ``--no-decode``). Repetitions alternate
folder and packed reads, so machine noise hits both alike; the ratio of the medians is the
figure to quote. The files the conversion skipped are left out of the folder side too, so both
read the same samples. A warm page cache makes the two close: decoding dominates. Run it on
shared storage, or after dropping the page cache, to see what packing removes.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from torch.utils.data import DataLoader, Dataset

import packer
from packer.folder import ImageFolderDataset


def _size(sample: Any) -> int:
    return len(sample) if isinstance(sample, bytes) else sample.width * sample.height


def _collate(batch: list[tuple[Any, int]]) -> int:
    return sum(_size(sample) for sample, _ in batch)


def _epoch_seconds(dataset: Dataset[Any], workers: int, batch_size: int) -> float:
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers, collate_fn=_collate)
    started = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("src", help="the ImageFolder tree that was converted")
    parser.add_argument("dst", help="the packed dataset (DST of packer convert)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-decode", action="store_true", help="read stored bytes only")
    args = parser.parse_args()

    decode = not args.no_decode
    packed = packer.open_dataset(args.dst, decode=decode)
    skipped = {s.path for s in packed.manifest.skipped}
    folder = ImageFolderDataset(args.src, exclude=skipped, decode=decode,
                                include_hidden=packed.manifest.scan.include_hidden)
    if len(folder) != len(packed):
        raise SystemExit(f"{args.src} has {len(folder)} readable samples, {args.dst} has "
                         f"{len(packed)}: is DST really a conversion of SRC?")
    times: dict[str, list[float]] = {"folder": [], "packed": []}
    for _ in range(args.repeats):
        times["folder"].append(_epoch_seconds(folder, args.workers, args.batch_size))
        times["packed"].append(_epoch_seconds(packed, args.workers, args.batch_size))
    n = len(packed)
    print(f"{n} samples, workers={args.workers}, batch={args.batch_size}, "
          f"{'decode to RGB' if decode else 'bytes only'}, {args.repeats} interleaved repeats")
    for name, values in times.items():
        print(f"  {name:<7} median {n / statistics.median(values):8.0f} images/s "
              f"(min-max {n / max(values):.0f}-{n / min(values):.0f})")
    ratio = statistics.median(times["folder"]) / statistics.median(times["packed"])
    print(f"  packed / folder: {ratio:.2f}x  ({packed.manifest.backend})")


if __name__ == "__main__":
    main()
