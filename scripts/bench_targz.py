#!/usr/bin/env python3
"""A ``.tar.gz`` decompressed once (its spool written while it is indexed) against twice.

Usage::

    python scripts/bench_targz.py [--images 3000] [--size 160] [--repeat 3] [--json]

Writes a ``.tar.gz`` of ``--images`` photo-like JPEGs of ``--size`` pixels a side (gzip level
6, as ``tar czf`` makes it), then, in one run and interleaved ``--repeat`` times, makes its
index and its spool (what a conversion does before its workers read a member):

- **twice** (the baseline, as packer did before): ``index_tar`` streams and decompresses the
  archive for its index, then ``ensure_spool`` decompresses it again into the spool;
- **once**: ``index_tar(spool_max_bytes=...)`` writes the spool as it decompresses for the index,
  and ``ensure_spool`` finds it made.

Both spools must be byte for byte the same. Prints the medians and the ratio (twice / once).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def photo_jpeg(number: int, size: int) -> bytes:
    """A smooth, photo-like JPEG (gradients and noise compress as photos do, not as flat fills)."""
    rng = np.random.default_rng(number)
    ramp = np.linspace(0, 255, size, dtype=np.float32)
    pixels = np.stack([np.add.outer(ramp * rng.random(), ramp * rng.random()) / 2 for _ in range(3)], axis=-1)
    pixels += rng.normal(0, 12, pixels.shape)
    out = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=85)
    return out.getvalue()


def write_archive(path: str, images: int, size: int) -> int:
    """Write the ``.tar.gz`` (ten classes); return its decompressed size."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for number in range(images):
            data = photo_jpeg(number, size)
            info = tarfile.TarInfo(f"class{number % 10}/{number:06d}.jpg")
            info.size, info.mtime = len(data), 1_262_304_000
            tar.addfile(info, io.BytesIO(data))
    with open(path, "wb") as handle:
        handle.write(gzip.compress(raw.getvalue(), compresslevel=6, mtime=0))
    return len(raw.getvalue())


def _spool(path: str, once: bool) -> tuple[float, bytes]:
    """Index ``path`` and make its spool, once or twice decompressed: seconds, the spool's bytes."""
    from packer.source.archive.spool import ensure_spool, remove_spool, spool_holes
    from packer.source.archive.tarindex import index_tar

    bound = 64 << 20
    started = time.perf_counter()
    listing, _ = index_tar(path, compressed=True, spool_max_bytes=bound if once else None)
    made = ensure_spool(listing.path, listing.size, listing.mtime_ns, expanded=listing.expanded,
                        holes=spool_holes(listing, bound))
    seconds = time.perf_counter() - started
    data = Path(made).read_bytes()
    remove_spool(listing.path, listing.size, listing.mtime_ns)
    return seconds, data


def run(images: int, size: int, repeat: int) -> dict[str, Any]:
    before = os.environ.get("PACKER_SPOOL_DIR")
    with tempfile.TemporaryDirectory(prefix="bench-targz-") as work:
        os.environ["PACKER_SPOOL_DIR"] = os.path.join(work, "spool")
        try:
            return _measure(work, images, size, repeat)
        finally:
            if before is None:
                os.environ.pop("PACKER_SPOOL_DIR", None)
            else:
                os.environ["PACKER_SPOOL_DIR"] = before


def _measure(work: str, images: int, size: int, repeat: int) -> dict[str, Any]:
    """Write the archive in ``work`` and time both ways ``repeat`` times, interleaved."""
    path = os.path.join(work, "train.tar.gz")
    expanded = write_archive(path, images, size)
    times: dict[str, list[float]] = {"twice": [], "once": []}
    spools: dict[str, bytes] = {}
    for _ in range(repeat):
        for way in ("twice", "once"):
            seconds, spools[way] = _spool(path, way == "once")
            times[way].append(seconds)
    if spools["once"] != spools["twice"]:
        raise RuntimeError("the spool written while indexing differs from the one made after")
    twice, once = statistics.median(times["twice"]), statistics.median(times["once"])
    return {"images": images, "archive_mb": os.path.getsize(path) / 1e6, "expanded_mb": expanded / 1e6,
            "twice_s": twice, "once_s": once, "twice_vs_once": twice / once}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--size", type=int, default=160, help="pixels a side")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    figures = run(args.images, args.size, args.repeat)
    if args.json:
        print(json.dumps(figures))
        return 0
    print(f"{figures['images']:,} images: {figures['archive_mb']:.1f} MB .tar.gz, "
          f"{figures['expanded_mb']:.1f} MB decompressed")
    print(f"index + spool, decompressed twice (baseline): {figures['twice_s']:.3f} s")
    print(f"index + spool, decompressed once: {figures['once_s']:.3f} s: {figures['twice_vs_once']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
