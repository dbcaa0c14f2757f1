#!/usr/bin/env python3
"""Read-speed benchmark: packed LMDB/HDF5 datasets against the ImageFolder tree they came from.

Usage::

    python scripts/bench_read.py SRC [--workdir DIR] [--workers 2] [--batch-size 64]
        [--repeats 3] [--limit N] [--slowfs PATH/TO/slowfs.py] [--cases NAME ...] [--json]

SRC is any ImageFolder tree (``SRC/<class>/<image>``). It is converted once into ``--workdir``
(default ``./bench_read_work``; reused while the source and options match): LMDB and HDF5 with
the default codec (``original``), and LMDB with ``--codec jpeg --resize 256`` and
``--codec pixels --resize 256``. Every case is then a ratio of images/s, packed over
"ImageFolder + the standard torchvision-style PIL pipeline" (``packer.tools.bench.StandardTrainTransform``)
read the same way in the same run: same DataLoader settings (``--workers``, ``--batch-size``,
``shuffle=True``), the same fixed random subset of ``--limit`` samples, repetitions interleaved
between the sides of a group, figures as medians.

Cases (``--cases`` picks some; default all):

* ``warm-std-{lmdb,hdf5}``: default codec, standard pipeline, page cache warm (persistent
  workers, one untimed warm-up epoch per side). Target >= 1.0x.
* ``cold-std-{lmdb,hdf5}``: the same, but before every timed epoch of a side its files (source
  images; shards + sample index) are dropped from the page cache with
  ``posix_fadvise(POSIX_FADV_DONTNEED)``; fresh DataLoaders per epoch on both sides so that no
  worker keeps a shard mapped. Target >= 1.0x.
* ``fast-{original,jpeg256,pixels256}``: packer's fast path (``RandomResizedCropFlip(224)`` in
  the workers, ``Normalize`` per batch in the main process) against the standard pipeline on
  the folder (warm). Targets 1.5x, 2.5x, 5x.
* ``slowfs-bytes-{lmdb,hdf5}``: stored bytes only (``decode=False``) through slowfs mounts of
  the source and of the work dir (0.5 ms per metadata request, 0.2 ms per read), against the
  folder's bytes through the same emulator. Target >= 3x.
* ``slowfs-std-{lmdb,hdf5}``: the standard pipeline on both sides through slowfs. Target 1.5x.
* ``slowfs0-...``: the same two kinds with zero latency, to show the emulator's own cost
  (informational, no target).

slowfs cases use fresh DataLoaders per epoch on both sides (each epoch re-opens the files, as a
new job would). They need ``--slowfs`` pointing at slowfs.py (``apt-get install fuse3
libfuse3-3; pip install mfusepy``); without it, or without FUSE, they are skipped with a reason.
The emulator tops out near 2,000 small-file reads/s, so keep ``--limit`` around 1000-1500.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Subset

import packer
from packer import ImageFolderDataset, RandomResizedCropFlip
from packer.tools.bench import BatchNormalizer, StandardTrainTransform, _count_bytes, consume

CONVERSIONS: dict[str, dict[str, Any]] = {
    "lmdb": {"to": "lmdb", "codec": "original"},
    "hdf5": {"to": "hdf5", "codec": "original"},
    "lmdb-jpeg256": {"to": "lmdb", "codec": "jpeg", "codec_options": {"resize": 256, "quality": 90}},
    "lmdb-pixels256": {"to": "lmdb", "codec": "pixels", "codec_options": {"resize": 256}},
}


@dataclass(frozen=True)
class Case:
    name: str
    group: str  # sides of one group run interleaved
    folder: str  # side keys
    packed: str
    target: float | None
    label: str


CASES: list[Case] = [
    Case("warm-std-lmdb", "warm", "folder-std", "lmdb-std", 1.0, "default codec, std PIL, warm, LMDB"),
    Case("warm-std-hdf5", "warm", "folder-std", "hdf5-std", 1.0, "default codec, std PIL, warm, HDF5"),
    Case("cold-std-lmdb", "cold", "folder-std", "lmdb-std", 1.0, "default codec, std PIL, cold, LMDB"),
    Case("cold-std-hdf5", "cold", "folder-std", "hdf5-std", 1.0, "default codec, std PIL, cold, HDF5"),
    Case("slowfs-bytes-lmdb", "slowfs", "folder-bytes", "lmdb-bytes", 3.0, "bytes only, slowfs, LMDB"),
    Case("slowfs-bytes-hdf5", "slowfs", "folder-bytes", "hdf5-bytes", 3.0, "bytes only, slowfs, HDF5"),
    Case("slowfs-std-lmdb", "slowfs", "folder-std", "lmdb-std", 1.5, "std PIL, slowfs, LMDB"),
    Case("slowfs-std-hdf5", "slowfs", "folder-std", "hdf5-std", 1.5, "std PIL, slowfs, HDF5"),
    Case("slowfs0-bytes-lmdb", "slowfs0", "folder-bytes", "lmdb-bytes", None, "bytes, slowfs 0 ms, LMDB"),
    Case("slowfs0-bytes-hdf5", "slowfs0", "folder-bytes", "hdf5-bytes", None, "bytes, slowfs 0 ms, HDF5"),
    Case("slowfs0-std-lmdb", "slowfs0", "folder-std", "lmdb-std", None, "std PIL, slowfs 0 ms, LMDB"),
    Case("slowfs0-std-hdf5", "slowfs0", "folder-std", "hdf5-std", None, "std PIL, slowfs 0 ms, HDF5"),
    Case("fast-original", "warm", "folder-std", "lmdb-fast", 1.5, "default codec, fast path (LMDB)"),
    Case("fast-jpeg256", "warm", "folder-std", "lmdb-jpeg256-fast", 2.5, "jpeg 256, fast path (LMDB)"),
    Case("fast-pixels256", "warm", "folder-std", "lmdb-pixels256-fast", 5.0, "pixels 256, fast path (LMDB)"),
]
GROUPS = {"warm": {"fresh": False, "cold": False, "latency": None},
          "cold": {"fresh": True, "cold": True, "latency": None},
          "slowfs": {"fresh": True, "cold": False, "latency": (0.5, 0.2)},
          "slowfs0": {"fresh": True, "cold": False, "latency": (0.0, 0.0)}}


def convert_all(src: str, workdir: str, needed: set[str]) -> dict[str, str]:
    """Convert ``src`` once per needed layout; reuse a finished one made from the same source."""
    os.makedirs(workdir, exist_ok=True)
    out = {}
    for name in sorted(needed):
        options = CONVERSIONS[name]
        dst = os.path.join(workdir, name)
        stamp_path = os.path.join(workdir, f"{name}.source.json")
        stamp = {"src": src, **options}
        with contextlib.suppress(Exception), open(stamp_path) as handle:
            if json.load(handle) == stamp:
                packer.open_dataset(dst)
                out[name] = dst
                continue
        started = time.perf_counter()
        print(f"converting {src} -> {dst} ({options})", file=sys.stderr, flush=True)
        packer.convert(src, dst, overwrite=True, **options)
        print(f"  done in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
        with open(stamp_path, "w") as handle:
            json.dump(stamp, handle)
        out[name] = dst
    return out


def make_dataset(key: str, src: str, dsts: dict[str, str]) -> tuple[Dataset[Any], Callable | None, bool]:
    """Dataset, collate_fn and whether to Normalize each batch in the main process, for a side."""
    kind, pipeline = key.rsplit("-", 1)
    if kind == "folder":
        skipped = {s.path for s in packer.open_dataset(dsts["lmdb"]).manifest.skipped}
        if pipeline == "bytes":
            return ImageFolderDataset(src, decode=False, exclude=skipped), _count_bytes, False
        return ImageFolderDataset(src, transform=StandardTrainTransform(), exclude=skipped), None, False
    dst = dsts[kind]
    if pipeline == "bytes":
        return packer.open_dataset(dst, decode=False), _count_bytes, False
    if pipeline == "std":
        return packer.open_dataset(dst, transform=StandardTrainTransform()), None, False
    # The fused path starts from the stored bytes, whatever the codec (pixels are read in place).
    return packer.open_dataset(dst, transform=RandomResizedCropFlip(224), decode=False), None, True


def files_of(dataset: Dataset[Any]) -> list[str]:
    """Files a side reads: source images, or every file under the packed dataset's directory."""
    if isinstance(dataset, ImageFolderDataset):
        return [path for path, _ in dataset.samples]
    return [os.path.join(d, f) for d, _, names in os.walk(dataset.root) for f in names]  # type: ignore[attr-defined]


def drop_cache(paths: list[str]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


@dataclass
class Side:
    key: str
    dataset: Dataset[Any]
    collate: Callable | None
    normalize: BatchNormalizer | None
    files: list[str]
    seconds: list[float] = field(default_factory=list)
    loader: DataLoader | None = None

    def make_loader(self, args: argparse.Namespace, persistent: bool) -> DataLoader:
        return DataLoader(self.dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                          persistent_workers=persistent and args.workers > 0, collate_fn=self.collate)

    def epoch(self, args: argparse.Namespace, *, fresh: bool, cold: bool) -> float:
        if cold:
            drop_cache(self.files)
        if fresh or self.loader is None:
            self.loader = self.make_loader(args, persistent=not fresh)
        started = time.perf_counter()
        consume(self.loader, self.normalize)
        elapsed = time.perf_counter() - started
        if fresh:
            self.loader = None
        return elapsed

    @property
    def images_per_second(self) -> float:
        return len(self.dataset) / statistics.median(self.seconds)  # type: ignore[arg-type]


def subset_indices(size: int, limit: int | None) -> list[int] | None:
    if limit is None or limit >= size:
        return None
    return sorted(torch.randperm(size, generator=torch.Generator().manual_seed(0))[:limit].tolist())


def run_group(group: str, keys: list[str], src: str, dsts: dict[str, str],
              args: argparse.Namespace) -> dict[str, Side]:
    settings = GROUPS[group]
    sides: dict[str, Side] = {}
    for key in keys:
        dataset, collate, normalize = make_dataset(key, src, dsts)
        files = files_of(dataset)
        indices = subset_indices(len(dataset), args.limit)  # type: ignore[arg-type]
        if indices is not None:
            dataset = Subset(dataset, indices)
        normalizer = BatchNormalizer(args.workers) if normalize else None
        sides[key] = Side(key, dataset, collate, normalizer, files)
    sizes = {key: len(side.dataset) for key, side in sides.items()}  # type: ignore[arg-type]
    if len(set(sizes.values())) != 1:
        raise SystemExit(f"sides read different numbers of samples: {sizes}")
    print(f"[{group}] {len(keys)} sides x {args.repeats} epochs of {next(iter(sizes.values()))} images",
          file=sys.stderr, flush=True)
    if not settings["fresh"]:
        for side in sides.values():
            side.epoch(args, fresh=False, cold=False)  # start persistent workers, warm the cache
    for repeat in range(args.repeats):
        for side in sides.values():
            side.seconds.append(side.epoch(args, fresh=settings["fresh"], cold=settings["cold"]))
            print(f"  [{group}] {repeat + 1}/{args.repeats} {side.key}: {side.seconds[-1]:.2f} s",
                  file=sys.stderr, flush=True)
    for side in sides.values():
        side.loader = None
    return sides


def load_slowfs(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("slowfs", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["slowfs"] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def mounts(slowfs: Any, src: str, workdir: str, latency: tuple[float, float]) -> Iterator[tuple[str, str]]:
    meta, read = latency
    bandwidth = 1000.0 if meta or read else 0.0  # 0 = unlimited, for the zero-latency run
    profile = {"meta_latency_ms": meta, "read_latency_ms": read, "bandwidth_mbs": bandwidth}
    with slowfs.mounted(src, **profile) as msrc, slowfs.mounted(workdir, **profile) as mwork:
        yield msrc, mwork


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", help="ImageFolder tree (SRC/<class>/<image>)")
    parser.add_argument("--workdir", default="bench_read_work", help="where the conversions go (reused)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=None, help="fixed random subset of N samples")
    parser.add_argument("--slowfs", default=None, help="path to slowfs.py, for the shared-storage cases")
    parser.add_argument("--cases", nargs="+", default=None, choices=[c.name for c in CASES], metavar="CASE",
                        help="cases to run (default all): " + ", ".join(c.name for c in CASES))
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args(argv)
    src = os.path.abspath(args.src)
    workdir = os.path.abspath(args.workdir)
    cases = [c for c in CASES if args.cases is None or c.name in args.cases]

    needed = {"lmdb"}  # the folder side takes its exclusions from the default-codec conversion
    for case in cases:
        kind = case.packed.rsplit("-", 1)[0]
        needed.add(kind)
    dsts = convert_all(src, workdir, needed)

    skipped: dict[str, str] = {}
    slowfs = None
    if any(c.group.startswith("slowfs") for c in cases):
        if args.slowfs is None:
            reason = "no --slowfs given"
        else:
            try:
                slowfs = load_slowfs(args.slowfs)
                with mounts(slowfs, src, workdir, (0.0, 0.0)):
                    pass
                reason = ""
            except Exception as err:  # FUSE or mfusepy missing, no /dev/fuse, ...
                slowfs, reason = None, f"slowfs unavailable: {type(err).__name__}: {err}"
        if slowfs is None:
            for case in cases:
                if case.group.startswith("slowfs"):
                    skipped[case.name] = reason
            print(f"skipping slowfs cases: {reason}", file=sys.stderr)
            cases = [c for c in cases if not c.group.startswith("slowfs")]

    results: dict[str, dict[str, Side]] = {}
    for group in GROUPS:
        members = [c for c in cases if c.group == group]
        if not members:
            continue
        keys = list(dict.fromkeys(k for c in members for k in (c.folder, c.packed)))
        latency = GROUPS[group]["latency"]
        if latency is None:
            results[group] = run_group(group, keys, src, dsts, args)
        else:
            with mounts(slowfs, src, workdir, latency) as (msrc, mwork):
                mdsts = {name: os.path.join(mwork, os.path.relpath(dst, workdir))
                         for name, dst in dsts.items()}
                results[group] = run_group(group, keys, msrc, mdsts, args)

    rows = []
    for case in cases:
        folder, packed = results[case.group][case.folder], results[case.group][case.packed]
        ratio = packed.images_per_second / folder.images_per_second
        rows.append({"case": case.name, "description": case.label, "images": len(packed.dataset),
                     "folder_images_per_second": folder.images_per_second,
                     "packed_images_per_second": packed.images_per_second, "ratio": ratio,
                     "target": case.target, "met": None if case.target is None else ratio >= case.target,
                     "folder_seconds": folder.seconds, "packed_seconds": packed.seconds})

    header = f"{'case':<20} {'description':<36} {'folder img/s':>12} {'packed img/s':>12} {'ratio':>7} " \
             f"{'target':>7} {'met?':>5}"
    print(f"workers={args.workers} batch_size={args.batch_size} repeats={args.repeats} limit={args.limit}")
    print(header)
    print("-" * len(header))
    for row in rows:
        target = "-" if row["target"] is None else f">={row['target']:g}x"
        met = "-" if row["met"] is None else ("yes" if row["met"] else "NO")
        print(f"{row['case']:<20} {row['description']:<36} {row['folder_images_per_second']:>12.1f} "
              f"{row['packed_images_per_second']:>12.1f} {row['ratio']:>6.2f}x {target:>7} {met:>5}")
    for name, reason in skipped.items():
        print(f"{name:<20} skipped: {reason}")
    if args.json:
        print(json.dumps({"src": src, "workers": args.workers, "batch_size": args.batch_size,
                          "repeats": args.repeats, "limit": args.limit, "results": rows,
                          "skipped": skipped}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
