#!/usr/bin/env python3
"""packer's loaders side by side with ImageFolder and FFCV, in one run.

Usage::

    python scripts/bench_ffcv.py SRC [--workdir DIR] [--reps 5] [--epochs 2] [--workers 2]
        [--batch-size 64] [--cases NAME ...] [--json FILE]

Every case produces the same thing a CPU training step consumes: normalised float32 batches of
224x224 ``RandomResizedCrop`` + horizontal-flip crops, ``--batch-size`` at a time, from
``--workers`` workers (FFCV: threads), shuffled, with a warm page cache (every file read once
first, then one untimed epoch that also starts persistent workers or compiles FFCV's
pipeline), over ``--epochs`` timed epochs of every sample. Each measurement runs in a fresh
process; repetitions are interleaved (rep 0 of every case, then rep 1, ...), and a repetition
disturbed by other load on the machine (more than ``--foreign-max`` cores used by processes
outside this benchmark) is run again. Figures are medians with min-max over reps; ratios are
of medians. The cases:

* ``folder``: ImageFolder + the torchvision PIL pipeline (torchvision's own if importable, else
  ``packer.tools.bench.StandardTrainTransform``, the same steps restated): the baseline.
* ``packer-std``: packer LMDB (original bytes), the same pipeline.
* ``packer-fast``, ``packer-fast-jpeg256``, ``packer-fast-pixels256``: packer's fast path
  (``RandomResizedCropFlip(224)`` on the stored bytes in the workers, ``Normalize`` per batch
  in the main process into a reused buffer, as the README's CPU recipe) on LMDB datasets with
  the original codec, ``--codec jpeg --resize 256`` and ``--codec pixels --resize 256``.
* ``ffcv-jpeg256``, ``ffcv-raw256``: FFCV's ``RandomResizedCropRGBImageDecoder`` pipeline on
  ``.beton`` files written from packer's ``pixels 256`` images (jpg at quality 90, and raw):
  the same stored pixels as packer's two 256 codecs. FFCV's own ``max_resolution=256`` caps the
  long side and stores a third fewer pixels, so this compares equal work.

SRC is converted once into ``--workdir`` (default ``./bench_ffcv_work``). FFCV is never a
dependency of packer: its cases run when ``ffcv`` imports (install it in a separate virtual
environment; the README's "Against FFCV" section has the commands) and are skipped, with that
advice, when not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

IMAGE_MEAN = (0.485, 0.456, 0.406)
IMAGE_STD = (0.229, 0.224, 0.225)
CASES = ["folder", "packer-std", "packer-fast", "packer-fast-jpeg256", "packer-fast-pixels256",
         "ffcv-jpeg256", "ffcv-raw256"]
#: Each FFCV case and the packer case that stores the same pixels.
EQUAL_PIXELS = {"ffcv-jpeg256": "packer-fast-jpeg256", "ffcv-raw256": "packer-fast-pixels256"}
FFCV_ADVICE = ("FFCV is not importable here, so its cases are skipped. To measure them, install it in a "
               "separate virtual environment (it needs a compiler, OpenCV and libjpeg-turbo headers): "
               "apt-get install pkg-config libopencv-dev libturbojpeg0-dev; python -m venv ffcv-venv; "
               ". ffcv-venv/bin/activate; pip install torch torchvision; pip install -e . ; "
               "pip install ffcv opencv-python-headless; then run this script with that venv's python.")


def ffcv_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("ffcv") is not None


# ----------------------------------------------------------------------------- formats


def prepare(src: str, workdir: str) -> dict[str, str]:
    """Convert SRC with packer (and write FFCV's files when it imports); paths by name."""
    import packer

    paths = {"folder": src}
    for name, codec, resize in [("lmdb", "original", None), ("jpeg256", "jpeg", 256),
                                ("pixels256", "pixels", 256)]:
        dst = os.path.join(workdir, name)
        if not os.path.exists(os.path.join(dst, "index.json")):
            print(f"converting {src} -> {dst} (codec {codec})", flush=True)
            packer.convert(src, dst, to="lmdb", overwrite=True, codec=codec,
                           codec_options={"resize": resize} if resize else None)
        paths[name] = dst
    if ffcv_available():
        for name, mode in [("ffcv_jpeg256.beton", "jpg"), ("ffcv_raw256.beton", "raw")]:
            path = os.path.join(workdir, name)
            if not os.path.exists(path):
                print(f"writing {path} from packer's pixels 256 images", flush=True)
                write_beton(paths["pixels256"], path, mode)
            paths[name] = path
    return paths


class _PackedPixels:
    """packer's pixels dataset as ``(HWC uint8 array, label)``, for FFCV's writer."""

    def __init__(self, root: str) -> None:
        import packer

        self.root, self.length, self.dataset = root, len(packer.open_dataset(root)), None

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[Any, int]:
        import numpy as np

        import packer

        if self.dataset is None:
            self.dataset = packer.open_dataset(self.root)
        image, label = self.dataset[index]
        return np.asarray(image).copy(), int(label)


def write_beton(pixels_root: str, path: str, mode: str) -> None:
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter

    field = RGBImageField(write_mode=mode, max_resolution=None, jpeg_quality=90)
    DatasetWriter(path, {"image": field, "label": IntField()}, num_workers=2).from_indexed_dataset(
        _PackedPixels(pixels_root))


# ----------------------------------------------------------------------------- one measurement


def standard_transform() -> Callable[[Any], Any]:
    """torchvision's RandomResizedCrop + flip + ToTensor + Normalize, or packer's restatement."""
    try:
        import torchvision.transforms as T  # noqa: N812
    except ImportError:
        from packer.tools.bench import StandardTrainTransform

        return StandardTrainTransform(224)
    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(IMAGE_MEAN, IMAGE_STD)])


def build(case: str, paths: dict[str, str], args: argparse.Namespace) -> tuple[Iterable[Any], Any]:
    """The loader of ``case`` and the per-batch work its main process does (or None)."""
    import torch
    from torch.utils.data import DataLoader

    import packer
    from packer.tools.bench import BatchNormalizer

    common = {"batch_size": args.batch_size, "shuffle": True, "num_workers": args.workers,
              "persistent_workers": args.workers > 0, "generator": torch.Generator().manual_seed(args.seed)}
    if case == "folder":
        folder = packer.ImageFolderDataset(paths["folder"], transform=standard_transform())
        return DataLoader(folder, **common), None
    if case == "packer-std":
        return DataLoader(packer.open_dataset(paths["lmdb"], transform=standard_transform()), **common), None
    if case.startswith("packer-fast"):
        root = paths[{"packer-fast": "lmdb", "packer-fast-jpeg256": "jpeg256",
                      "packer-fast-pixels256": "pixels256"}[case]]
        dataset = packer.open_dataset(root, transform=packer.RandomResizedCropFlip(224), decode=False)
        # One reused float buffer; the main process's threads held to the cores the workers leave.
        return DataLoader(dataset, **common), BatchNormalizer(args.workers)
    import numpy as np
    from ffcv.fields.basics import IntDecoder
    from ffcv.fields.decoders import RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import NormalizeImage, RandomHorizontalFlip, Squeeze, ToTensor, ToTorchImage

    # On the CPU, FFCV's NormalizeImage runs on the uint8 HWC batch, before ToTensor.
    pipeline = [RandomResizedCropRGBImageDecoder((224, 224)), RandomHorizontalFlip(),
                NormalizeImage(np.array(IMAGE_MEAN) * 255, np.array(IMAGE_STD) * 255, np.float32),
                ToTensor(), ToTorchImage()]
    loader = Loader(paths[{"ffcv-jpeg256": "ffcv_jpeg256.beton", "ffcv-raw256": "ffcv_raw256.beton"}[case]],
                    batch_size=args.batch_size, num_workers=args.workers, order=OrderOption.RANDOM,
                    seed=args.seed, drop_last=False, os_cache=True,
                    pipelines={"image": pipeline, "label": [IntDecoder(), ToTensor(), Squeeze()]})
    return loader, None


def read_all(path: str) -> None:
    """Warm the page cache: read every file under ``path`` once."""
    files = [path] if os.path.isfile(path) else [os.path.join(d, f) for d, _, names in os.walk(path)
                                                   for f in names]
    for name in files:
        with open(name, "rb", buffering=0) as handle:
            while handle.read(8 << 20):
                pass


def measure_one(args: argparse.Namespace) -> None:
    """Run in a fresh process: warm, build, one untimed epoch, then the timed epochs."""
    import torch

    torch.set_num_threads(1)
    paths = json.loads(args.paths)
    case = args.one
    source = {"folder": "folder", "packer-std": "lmdb", "packer-fast": "lmdb",
              "packer-fast-jpeg256": "jpeg256", "packer-fast-pixels256": "pixels256",
              "ffcv-jpeg256": "ffcv_jpeg256.beton", "ffcv-raw256": "ffcv_raw256.beton"}[case]
    read_all(paths[source])
    loader, per_batch = build(case, paths, args)

    def epoch() -> tuple[float, int]:
        started, images = time.perf_counter(), 0
        for batch, _ in loader:
            if per_batch is not None:
                batch = per_batch(batch)
            images += batch.shape[0]
        return time.perf_counter() - started, images

    threads = per_batch.threads() if hasattr(per_batch, "threads") else contextlib.nullcontext()
    with threads:
        epoch()
        timed = [epoch() for _ in range(args.epochs)]
    seconds, images = sum(t for t, _ in timed), sum(n for _, n in timed)
    print("RESULT " + json.dumps({"case": case, "images_per_second": images / seconds}), flush=True)


# ----------------------------------------------------------------------------- the driver


def _cpu_seconds() -> tuple[float, float]:
    """(all processes' busy CPU seconds from /proc/stat, this process tree's CPU seconds)."""
    with open("/proc/stat", encoding="ascii") as stat:
        user, nice, system, _, _, irq, softirq = (int(v) for v in stat.readline().split()[1:8])
    busy = (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return busy, own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_case(case: str, rep: int, paths: dict[str, str],
             args: argparse.Namespace) -> tuple[float | None, float]:
    """Images/s of one measurement (None if it failed) and the foreign cores seen meanwhile."""
    command = [sys.executable, os.path.abspath(__file__), "--one", case, "--paths", json.dumps(paths),
               "--epochs", str(args.epochs), "--workers", str(args.workers),
               "--batch-size", str(args.batch_size), "--seed", str(rep)]
    busy0, own0 = _cpu_seconds()
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - started
    busy1, own1 = _cpu_seconds()
    foreign = max(0.0, (busy1 - busy0) - (own1 - own0)) / wall
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not results:
        print(f"  {case} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
        return None, foreign
    return float(json.loads(results[-1][7:])["images_per_second"]), foreign


def summary(figures: dict[str, list[float]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    base = statistics.median(figures["folder"]) if figures.get("folder") else None
    for case, values in figures.items():
        if not values:
            continue
        median = statistics.median(values)
        row: dict[str, Any] = {"median": median, "min": min(values), "max": max(values), "reps": values}
        if base:
            row["vs_folder"] = median / base
        peer = next((ffcv for ffcv, mine in EQUAL_PIXELS.items() if mine == case), None)
        if peer and figures.get(peer):
            row["vs_ffcv_equal_pixels"] = median / statistics.median(figures[peer])
        out[case] = row
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", nargs="?")
    parser.add_argument("--workdir", default="bench_ffcv_work")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--cases", nargs="+", choices=CASES, default=CASES)
    parser.add_argument("--foreign-max", type=float, default=0.25)
    parser.add_argument("--max-reruns", type=int, default=3)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--paths", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        measure_one(args)
        return 0
    if not args.src:
        parser.error("SRC (an ImageFolder tree) is required")
    cases = list(args.cases)
    if not ffcv_available():
        print(FFCV_ADVICE, file=sys.stderr)
        cases = [case for case in cases if not case.startswith("ffcv")]
    os.makedirs(args.workdir, exist_ok=True)
    paths = prepare(os.path.abspath(args.src), os.path.abspath(args.workdir))
    figures: dict[str, list[float]] = {case: [] for case in cases}
    for rep in range(args.reps):
        for attempt in range(args.max_reruns + 1):
            results = {case: run_case(case, rep, paths, args) for case in cases}
            contended = [case for case, (_, foreign) in results.items() if foreign > args.foreign_max]
            line = "  ".join(f"{case} {rate:.0f}" if rate else f"{case} failed"
                             for case, (rate, _) in results.items())
            note = f"  (contended: {', '.join(contended)})" if contended else ""
            print(f"rep {rep}.{attempt}: {line}{note}", flush=True)
            if not contended or attempt == args.max_reruns:
                break
        for case, (rate, _) in results.items():
            if rate is not None:
                figures[case].append(rate)
    table = summary(figures)
    print(f"\n{args.reps} reps x {args.epochs} epochs, {args.workers} workers, batch {args.batch_size}; "
          "images/s median (min-max)")
    print("| case | images/s | vs folder | vs FFCV, equal pixels |\n|---|---|---|---|")
    for case, row in table.items():
        print(f"| {case} | {row['median']:,.0f} ({row['min']:,.0f}-{row['max']:,.0f}) | "
              f"{row.get('vs_folder', float('nan')):.2f}x | "
              + (f"{row['vs_ffcv_equal_pixels']:.2f}x |" if "vs_ffcv_equal_pixels" in row else "- |"))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"args": {k: v for k, v in vars(args).items() if k not in ("one", "paths")},
                       "summary": table}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
