#!/usr/bin/env python3
"""A rehearsal at ImageNet's scale: a synthetic tar of class tars, indexed, converted and opened.

Usage::

    python scripts/rehearse_imagenet.py [--classes 1000] [--per-class 1281] [--work DIR]
        [--skip-convert] [--keep] [--json]

Writes ``train.tar`` as ``ILSVRC2012_img_train.tar`` is laid out (``--classes`` member tars
``n00000000.tar`` ... of ``--per-class`` tiny JPEGs each, GNU format; each JPEG a distinct 8x8
image of a few hundred bytes, so the archive is headers as much as data), then, in one run:

- **index**: ``index_tar`` of the archive with one process reading every header with tarfile
  (the baseline, ``tarwalk.READ_PLAIN_HEADERS = False``), with one process reading plain headers
  without it, and with the pool that indexes member tars (one process per CPU, at most 8), the
  same listing all three times; seconds and microseconds a member, and the ratios to tarfile;
- **convert**: ``packer.convert`` of the archive to LMDB (``--check none``, the conversion's
  default workers) in a fresh process: seconds, images/s, its peak resident memory and its
  largest child's (``ru_maxrss``; forked children count the pages they share with it);
- **open**: the dataset opened again in a fresh process (``open_dataset``), its time to the
  first batch of 256 through ``make_loader`` (2 workers), that process's peak memory and each
  worker's resident memory (from ``/proc``). A local path: opening from a URL is
  ``bench_remote.py``'s.

Defaults are ImageNet's 1,000 x 1,281 = 1.28M images (a 2.0 GB archive; about 4 minutes on 2
cores, a third of it writing the archive, which a second run with ``--work`` reuses);
``--classes 100 --per-class 128`` runs in seconds.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent


def tiny_jpeg(number: int) -> bytes:
    """A distinct 8x8 JPEG for image ``number`` (its pixels are the number's bytes)."""
    pixels = np.frombuffer(number.to_bytes(192, "little", signed=False), np.uint8).reshape(8, 8, 3)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=75)
    return out.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes, mtime: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), mtime
    tar.addfile(info, io.BytesIO(data))


def write_archive(path: str, classes: int, per_class: int) -> int:
    """Write the tar of class tars; return the images in it. Deterministic (fixed mtimes)."""
    number = 0
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as outer:
        for c in range(classes):
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w", format=tarfile.GNU_FORMAT) as tar:
                for i in range(per_class):
                    _add(tar, f"n{c:08d}_{i}.JPEG", tiny_jpeg(number), 1_262_304_000)
                    number += 1
            _add(outer, f"n{c:08d}.tar", inner.getvalue(), 1_262_304_000)
    return number


def _fingerprint(listing: Any) -> str:
    """A digest of everything a listing says (its members' fields, notes and inner listings)."""
    digest = hashlib.sha256(repr((listing.format, listing.size, tuple(map(tuple, listing.members)),
                                  listing.notes)).encode())
    for name, inner in listing.inner.items():
        digest.update(repr((name, tuple(map(tuple, inner.members)), inner.notes, inner.error)).encode())
    return digest.hexdigest()


def _timed_index(path: str, workers: int | None) -> tuple[float, str, int]:
    """Seconds to index ``path``, the listing's fingerprint and its members in member tars. The
    listing is let go before the next is timed, as each conversion indexes in a fresh process
    (a pool forked from a process holding earlier listings would pay for their pages)."""
    from packer.source.archive.tarindex import index_tar

    gc.collect()
    started = time.perf_counter()
    listing, _ = index_tar(path, workers=workers)
    seconds = time.perf_counter() - started
    return seconds, _fingerprint(listing), sum(len(inner.members) for inner in listing.inner.values())


def time_index(path: str) -> dict[str, Any]:
    """``index_tar`` with one process reading every header with tarfile (the baseline), with one
    process reading plain headers without it, and with the pool; the three listings must be equal."""
    from packer.source.archive import tarwalk

    tarwalk.READ_PLAIN_HEADERS = False
    try:
        tarfile_only, reference, members = _timed_index(path, 1)
    finally:
        tarwalk.READ_PLAIN_HEADERS = True
    serial, alone, _ = _timed_index(path, 1)
    parallel, pooled, _ = _timed_index(path, None)
    if alone != reference:
        raise RuntimeError("reading plain headers without tarfile gave another listing")
    if pooled != alone:
        raise RuntimeError("the pool's listing differs from one process's")
    return {"members": members, "tarfile_s": tarfile_only, "serial_s": serial, "pooled_s": parallel,
            "plain_vs_tarfile": tarfile_only / serial, "pool_vs_serial": serial / parallel,
            "pool_vs_tarfile": tarfile_only / parallel, "tarfile_us_per_member": 1e6 * tarfile_only / members,
            "serial_us_per_member": 1e6 * serial / members, "pooled_us_per_member": 1e6 * parallel / members}


CONVERT = """
import json, resource, sys, time
import packer
started = time.perf_counter()
result = packer.convert(sys.argv[1], sys.argv[2], to="lmdb", check="none", overwrite=True)
seconds = time.perf_counter() - started
with open("/proc/self/status") as handle:
    peak = next(int(line.split()[1]) for line in handle if line.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "images": result.manifest.num_samples,
                  "shards": len(result.manifest.shards), "peak_mb": peak / 1024,
                  "child_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def _fresh(code: str, *args: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter (its memory its own) and return the JSON it prints last."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": path})
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def time_convert(path: str, dst: str) -> dict[str, Any]:
    """Convert in a fresh process: seconds, images/s, its peak memory and its largest child's."""
    figures = _fresh(CONVERT, path, dst)
    return {**figures, "images_per_s": figures["images"] / figures["seconds"]}


OPEN = """
import json, sys, time
started = time.perf_counter()
import packer
ds = packer.open_dataset(sys.argv[1], decode=False)
opened = time.perf_counter() - started
loader = packer.make_loader(ds, 256, num_workers=2, drop_last=False, collate_fn=list)
batches = iter(loader)
next(batches)
first = time.perf_counter() - started

def status(pid, key):  # kB, from the kernel's own accounting (ru_maxrss would survive exec)
    with open(f"/proc/{pid}/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(key + ":"))

workers = [status(w.pid, "VmRSS") / 1024 for w in batches._workers]
print(json.dumps({"open_s": opened, "first_batch_s": first, "samples": len(ds),
                  "peak_mb": status("self", "VmHWM") / 1024, "worker_mb": max(workers)}))
"""


def time_open(dst: str) -> dict[str, Any]:
    """Open the dataset in a fresh process and take one batch: what a training job pays first."""
    return _fresh(OPEN, dst)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--per-class", type=int, default=1281)
    parser.add_argument("--work", default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--skip-convert", action="store_true", help="index only")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    work = args.work or tempfile.mkdtemp(prefix="rehearse-")
    os.makedirs(work, exist_ok=True)
    archive = os.path.join(work, f"train-{args.classes}x{args.per_class}.tar")
    figures: dict[str, Any] = {"classes": args.classes, "per_class": args.per_class}
    try:
        if not os.path.exists(archive):
            started = time.perf_counter()
            write_archive(archive + ".part", args.classes, args.per_class)
            os.replace(archive + ".part", archive)
            figures["write_s"] = time.perf_counter() - started
        figures["archive_mb"] = os.path.getsize(archive) / 1e6
        figures["index"] = time_index(archive)
        if not args.skip_convert:
            dst = os.path.join(work, "packed")
            figures["convert"] = time_convert(archive, dst)
            figures["open"] = time_open(dst)
    finally:
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(figures))
        return 0
    index = figures["index"]
    print(f"archive: {args.classes} class tars x {args.per_class} JPEGs = {index['members']:,} images, "
          f"{figures['archive_mb']:.0f} MB")
    print(f"index, tarfile reading every header (baseline): {index['tarfile_s']:.2f} s "
          f"({index['tarfile_us_per_member']:.1f} us a member)")
    print(f"index: one process {index['serial_s']:.2f} s ({index['serial_us_per_member']:.1f} us a member), "
          f"pool {index['pooled_s']:.2f} s ({index['pooled_us_per_member']:.1f} us): "
          f"{index['pool_vs_serial']:.2f}x; against tarfile: one process {index['plain_vs_tarfile']:.2f}x, "
          f"pool {index['pool_vs_tarfile']:.2f}x")
    if "convert" in figures:
        conv, opened = figures["convert"], figures["open"]
        print(f"convert: {conv['seconds']:.1f} s, {conv['images_per_s']:,.0f} images/s, "
              f"{conv['shards']} shards; peak memory {conv['peak_mb']:.0f} MB (largest child "
              f"{conv['child_peak_mb']:.0f} MB, forked: it shares this process's pages)")
        print(f"open: {opened['open_s']:.2f} s, first batch of 256 after {opened['first_batch_s']:.2f} s; "
              f"peak memory {opened['peak_mb']:.0f} MB, each DataLoader worker {opened['worker_mb']:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
