#!/usr/bin/env python3
"""How fast `packer convert` runs against the I/O floor of the same machine, in one run.

    python scripts/bench_convert.py SRC [--backend lmdb] [--repeats 3] [--workdir DIR]
                                        [--checks none header full] [--sources tree]
                                        [--digests blake3 sha256] [--json]

For any ImageFolder tree SRC (make one with ``make_corpus.py`` from packer's shared tools, or use
your own), it times, interleaved and repeated so machine noise hits every case alike:

* ``tar cf`` of SRC into the work directory, then ``sync`` of the archive: reading every file
  and writing it durably once, the I/O floor a converter cannot beat (the archive goes to the
  same file system as the conversions' output);
* ``packer convert --check none`` (no decoding), ``--check header`` (headers parsed) and
  ``--check full`` (every image decoded once), each with 1 and 2 workers.

It prints images/s and MB/s (source bytes per second) for each case, medians with min-max, each
case's speed as a ratio of the ``tar cf`` floor's, and the ratios the README quotes:
``--check none`` against ``tar``, and ``--workers 2`` against ``--workers 1`` with
``--check full``. Every run starts from a warm page cache (SRC is read once first), and each
conversion writes a fresh DST in the work directory.

``--sources`` names what each conversion reads: ``tree`` (SRC itself), ``tar`` (an uncompressed
tar of SRC, converted without extracting it) and ``zip`` (a zip of SRC, members stored as they
are, as image archives usually are). Archives are built once in the work directory, untimed,
and their page cache warmed; every case then runs once per source kind, against the same floor,
and ``<kind>_vs_tree`` ratios compare converting the archive with converting the tree.

``--digests`` names the checksum algorithms to convert with (default: packer's default here,
``blake3`` with the ``fast`` extra, else ``sha256``); the first is the one the cases above use,
each other one adds the same cases suffixed ``[sha256]``, and ``<other>_vs_<first>`` ratios.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from typing import Any

import packer
from packer.cpus import available_cpus
from packer.digests import default_digest, digest_names

#: What a conversion can read SRC as; one entry per kind of source packer converts.
SOURCES: tuple[str, ...] = ("tree", "tar", "zip")


def _tar_of(src: str, work: str) -> str:
    """An uncompressed tar of the tree as ``tar cf`` (GNU tar) writes it, and as ImageNet's
    archives are: GNU format, members ``<class>/<image>`` (Python's default, pax, adds an extended
    header per member, which doubles the headers to index)."""
    path = os.path.join(work, "source.tar")
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as archive:
        for name in sorted(os.listdir(src)):
            archive.add(os.path.join(src, name), arcname=name)
    _warm_file(path)
    return path


def _zip_of(src: str, work: str) -> str:
    """A zip of the tree, members stored (JPEGs do not deflate)."""
    path = os.path.join(work, "source.zip")
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for dirpath, dirnames, filenames in os.walk(src):
            dirnames.sort()
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                archive.write(full, os.path.relpath(full, src))
    _warm_file(path)
    return path


def _warm_file(path: str) -> None:
    with open(path, "rb") as handle:
        while handle.read(1 << 24):
            pass


#: source kind -> fn(src, work) giving the path ``packer.convert`` reads (built once, untimed).
_PREPARERS: dict[str, Callable[[str, str], str]] = {"tree": lambda src, work: src, "tar": _tar_of,
                                                    "zip": _zip_of}

CHECKS: tuple[str, ...] = ("none", "header", "full")
WORKERS: tuple[int, ...] = (1, 2)
FLOOR = "tar cf + sync"


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


def _time_convert(source: str, work: str, backend: str, check: str, workers: int, digest: str) -> float:
    dst = os.path.join(work, "dst")
    if os.path.exists(dst):
        shutil.rmtree(dst)
    started = time.perf_counter()
    packer.convert(source, dst, to=backend, check=check, workers=workers, digest=digest)
    seconds = time.perf_counter() - started
    shutil.rmtree(dst)
    return seconds


def case_name(source: str, check: str, workers: int, digest: str = "") -> str:
    """``check full, workers 2``; other sources than the tree are prefixed: ``tar: check ...``;
    a digest other than the first of ``--digests`` is a suffix: ``check none, workers 2 [sha256]``."""
    name = f"check {check}, workers {workers}" + (f" [{digest}]" if digest else "")
    return name if source == "tree" else f"{source}: {name}"


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("src", help="an ImageFolder tree")
    parser.add_argument("--backend", default="lmdb", choices=packer.backend_names())
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs of every case (the "
                        "figures are their medians; use 3 or more for figures worth quoting)")
    parser.add_argument("--workdir", default=None, help="where archives and datasets go, on the file "
                        "system to measure (default: a temporary directory next to nothing else)")
    parser.add_argument("--checks", nargs="+", default=list(CHECKS), choices=CHECKS,
                        help="the --check levels to run (default: all)")
    parser.add_argument("--sources", nargs="+", default=["tree"], choices=SOURCES,
                        help="what conversions read SRC as (default: tree)")
    parser.add_argument("--digests", nargs="+", default=[default_digest()], choices=digest_names(),
                        help="checksum algorithms to convert with; the first is the main one "
                             f"(default: {default_digest()}, packer's default here)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser.parse_args()


def main() -> None:
    args = _parse_args()
    images, source_bytes = _tree_stats(args.src)
    _warm(args.src)
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="packer-bench-") as work:
        inputs = {source: _PREPARERS[source](args.src, work) for source in args.sources}
        cases: dict[str, Callable[[], float]] = {FLOOR: lambda: _time_tar(args.src, work)}
        first = args.digests[0]
        for digest in args.digests:
            for source, path in inputs.items():
                for check in args.checks:
                    for workers in WORKERS:
                        name = case_name(source, check, workers, "" if digest == first else digest)
                        cases[name] = functools.partial(_time_convert, path, work, args.backend, check,
                                                        workers, digest)
        times = {name: [] for name in cases}
        for _ in range(args.repeats):
            for name, run in cases.items():
                times[name].append(run())

    def rate(name: str) -> float:
        return source_bytes / statistics.median(times[name]) / 1e6

    figures = {
        name: {"median_s": statistics.median(values), "min_s": min(values), "max_s": max(values),
               "images_per_s": images / statistics.median(values), "mb_per_s": rate(name),
               "vs_tar": rate(name) / rate(FLOOR)}
        for name, values in times.items()
    }
    ratios: dict[str, float] = {}
    if "none" in args.checks and "tree" in args.sources:
        ratios["check_none_workers2_vs_tar"] = rate("check none, workers 2") / rate(FLOOR)
        ratios["check_none_workers1_vs_tar"] = rate("check none, workers 1") / rate(FLOOR)
    for source in args.sources:
        if source != "tree" and "tree" in args.sources:
            for check in args.checks:
                ratios[f"{source}_vs_tree_check_{check}_workers2"] = (
                    rate(case_name(source, check, 2)) / rate(case_name("tree", check, 2)))
    if "full" in args.checks and "tree" in args.sources:
        full_2, full_1 = rate("check full, workers 2"), rate("check full, workers 1")
        ratios["check_full_workers2_vs_workers1"] = full_2 / full_1
    for digest in args.digests[1:]:
        for source in args.sources:
            for check in args.checks:
                prefix = "" if source == "tree" else f"{source}_"
                ratios[f"{prefix}{digest}_vs_{args.digests[0]}_check_{check}_workers2"] = (
                    rate(case_name(source, check, 2, digest)) / rate(case_name(source, check, 2)))
    if args.json:
        print(json.dumps({"src": args.src, "backend": args.backend, "digests": args.digests, "images": images,
                          "source_bytes": source_bytes, "cpus": available_cpus(),
                          "repeats": args.repeats, "sources": args.sources, "cases": figures,
                          "ratios": ratios}, indent=2))
        return
    _print(args, images, source_bytes, figures, ratios)


def _print(args: argparse.Namespace, images: int, source_bytes: int, figures: dict[str, Any],
           ratios: dict[str, float]) -> None:
    print(f"{args.src}: {images} images, {source_bytes / 1e6:.1f} MB; backend {args.backend}, "
          f"digest {args.digests[0]}; "
          f"{args.repeats} interleaved repeats, warm page cache, {available_cpus()} CPUs")
    width = max(24, *(len(name) for name in figures))
    print(f"  {'case':<{width}} {'images/s':>9} {'MB/s':>8}   {'median s (min-max)':<18}  vs tar")
    for name, fig in figures.items():
        spread = f"{fig['median_s']:.2f} ({fig['min_s']:.2f}-{fig['max_s']:.2f})"
        print(f"  {name:<{width}} {fig['images_per_s']:>9.0f} {fig['mb_per_s']:>8.1f}   {spread:<18}  "
              f"{fig['vs_tar']:.2f}x")
    if "check_none_workers2_vs_tar" in ratios:
        print(f"  --check none, 2 workers vs tar cf: {ratios['check_none_workers2_vs_tar']:.2f}x "
              f"(1 worker: {ratios['check_none_workers1_vs_tar']:.2f}x)")
    if "check_full_workers2_vs_workers1" in ratios:
        print(f"  --check full, 2 workers vs 1:      {ratios['check_full_workers2_vs_workers1']:.2f}x")
    for key, value in ratios.items():
        if "_vs_tree_" in key:  # tar_vs_tree_check_none_workers2
            source, _, rest = key.partition("_vs_tree_check_")
            check = rest.partition("_")[0]
            print(f"  {source} source vs the tree, --check {check}, 2 workers: {value:.2f}x")
    for digest in args.digests[1:]:
        for source in args.sources:
            for check in args.checks:
                prefix = "" if source == "tree" else f"{source}_"
                value = ratios[f"{prefix}{digest}_vs_{args.digests[0]}_check_{check}_workers2"]
                print(f"  {prefix.rstrip('_') or 'tree'}, --digest {digest} vs {args.digests[0]}, "
                      f"--check {check}, 2 workers: {value:.2f}x")


if __name__ == "__main__":
    main()
