#!/usr/bin/env python3
"""How fast `packer convert` runs against the I/O floor of the same machine, in one run.

    python scripts/bench_convert.py SRC [--backend lmdb] [--repeats 3] [--workdir DIR] [--json]

For any ImageFolder tree SRC (make one with ``make_corpus.py`` from packer's shared tools, or use
your own), it times, interleaved and repeated so machine noise hits every case alike:

* ``tar cf`` of SRC into the work directory, then ``sync`` of the archive: reading every file
  and writing it durably once, the I/O floor a converter cannot beat;
* ``packer convert --check none`` (no decoding) with 1 and 2 workers;
* ``packer convert --check full`` (every image decoded once) with 1 and 2 workers.

It prints images/s and MB/s (source bytes per second) for each, medians with min-max, and the
ratios the README quotes: ``--check none`` against ``tar``, and ``--workers 2`` against
``--workers 1`` with ``--check full``. Every run starts from a warm page cache (SRC is read once
first), and each conversion writes a fresh DST in the work directory (same disk as the tar).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from typing import Any

import packer
from packer.cpus import available_cpus


def _tree_stats(src: str) -> tuple[int, int]:
    index = packer.scan_imagefolder(src)
    return len(index.items), sum(max(item.size, 0) for item in index.items)


def _warm(src: str) -> None:
    for folder, _, files in os.walk(src):
        for name in files:
            with open(os.path.join(folder, name), "rb") as handle:
                while handle.read(1 << 20):
                    pass


def _time_tar(src: str, work: str) -> float:
    archive = os.path.join(work, "floor.tar")
    started = time.perf_counter()
    subprocess.run(["tar", "cf", archive, "-C", src, "."], check=True)
    subprocess.run(["sync", archive], check=True)
    seconds = time.perf_counter() - started
    os.unlink(archive)
    return seconds


def _time_convert(src: str, work: str, backend: str, check: str, workers: int) -> float:
    dst = os.path.join(work, "dst")
    if os.path.exists(dst):
        shutil.rmtree(dst)
    started = time.perf_counter()
    packer.convert(src, dst, to=backend, check=check, workers=workers)
    seconds = time.perf_counter() - started
    shutil.rmtree(dst)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("src", help="an ImageFolder tree")
    parser.add_argument("--backend", default="lmdb", choices=packer.backend_names())
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", default=None, help="where archives and datasets go "
                        "(default: a temporary directory next to nothing else)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()

    images, source_bytes = _tree_stats(args.src)
    _warm(args.src)
    cases: dict[str, Any] = {
        "tar cf + sync": lambda work: _time_tar(args.src, work),
        "check none, workers 1": lambda work: _time_convert(args.src, work, args.backend, "none", 1),
        "check none, workers 2": lambda work: _time_convert(args.src, work, args.backend, "none", 2),
        "check full, workers 1": lambda work: _time_convert(args.src, work, args.backend, "full", 1),
        "check full, workers 2": lambda work: _time_convert(args.src, work, args.backend, "full", 2),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="packer-bench-") as work:
        for _ in range(args.repeats):
            for name, run in cases.items():
                times[name].append(run(work))

    def rate(name: str) -> float:
        return source_bytes / statistics.median(times[name]) / 1e6

    figures = {
        name: {"median_s": statistics.median(values), "min_s": min(values), "max_s": max(values),
               "images_per_s": images / statistics.median(values), "mb_per_s": rate(name)}
        for name, values in times.items()
    }
    ratios = {
        "check_none_workers2_vs_tar": rate("check none, workers 2") / rate("tar cf + sync"),
        "check_none_workers1_vs_tar": rate("check none, workers 1") / rate("tar cf + sync"),
        "check_full_workers2_vs_workers1": rate("check full, workers 2") / rate("check full, workers 1"),
    }
    if args.json:
        print(json.dumps({"src": args.src, "backend": args.backend, "images": images,
                          "source_bytes": source_bytes, "cpus": available_cpus(),
                          "repeats": args.repeats, "cases": figures, "ratios": ratios}, indent=2))
        return
    print(f"{args.src}: {images} images, {source_bytes / 1e6:.1f} MB; backend {args.backend}; "
          f"{args.repeats} interleaved repeats, warm page cache, {available_cpus()} CPUs")
    print(f"  {'case':<24} {'images/s':>9} {'MB/s':>8}   median s (min-max)")
    for name, fig in figures.items():
        print(f"  {name:<24} {fig['images_per_s']:>9.0f} {fig['mb_per_s']:>8.1f}   "
              f"{fig['median_s']:.2f} ({fig['min_s']:.2f}-{fig['max_s']:.2f})")
    print(f"  --check none, 2 workers vs tar cf: {ratios['check_none_workers2_vs_tar']:.2f}x "
          f"(1 worker: {ratios['check_none_workers1_vs_tar']:.2f}x)")
    print(f"  --check full, 2 workers vs 1:      {ratios['check_full_workers2_vs_workers1']:.2f}x")


if __name__ == "__main__":
    main()
