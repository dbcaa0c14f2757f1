#!/usr/bin/env python3
"""What OpenCV (the ``fast`` extra's resizer) buys the fast path, in one run: speed and pixels.

    python scripts/bench_opencv.py SRC_OR_DST [--size 224] [--resize 256] [--limit 1000]
                                              [--repeats 5] [--batch 256] [--json]

SRC_OR_DST is an ImageFolder tree or a packed dataset (read with ``decode=False``; a
``--codec pixels`` dataset is where resizing costs the most). The stored bytes of up to
``--limit`` images, evenly spaced, are read into memory first; everything runs in this process
with one torch thread, as in a DataLoader worker.

1. The fast-path transforms, ``RandomResizedCropFlip(size)`` (train) and
   ``CenterCropResize(size, resize)`` (eval), with ``resampler="opencv"`` (what ``"auto"``
   picks with the ``fast`` extra) and ``resampler="torch"`` (what it picks without), the
   decoder the same (simplejpeg when installed); and, when simplejpeg is installed, without
   the extra at all (Pillow decodes, torch resizes): ms per image, OpenCV's speedup and the
   whole extra's. All draw the same crops (same seed).
2. The train crops OpenCV resizes: packer hands OpenCV only crops enlarged on both axes (it
   leaves shrinking to torch's antialiased kernel). Their share of the draws, the fused
   ``crop_resize`` on them with each resampler, and the resize step alone with lighter
   candidates that need no OpenCV: torch's plain bilinear kernel and Pillow's (torchvision's).
3. Pixels: each resampler's crops against torchvision's on PIL images (Pillow crop, bilinear
   resize, mirror; ``Resize`` + ``CenterCrop`` for eval), as mean absolute difference in levels
   of 0-255, over all train draws, the enlarged ones, and eval.

Times are this process's CPU time (one thread, so a busy machine's other processes do not
count); repetitions alternate the rows; figures are medians over repetitions. Without OpenCV
installed the script still runs its other rows and says so on stderr.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

# The sibling benchmark's sampling and command line (scripts/ is on sys.path when run as a script).
from bench_transforms import load_payloads, transform_arguments
from PIL import Image

from packer.format.codecs.pixels import pixels_array
from packer.read import speedups
from packer.read.crop_params import center_crop_geometry, random_resized_crop_params
from packer.read.crop_resize import crop_resize
from packer.read.resampling import resize_into
from packer.read.transforms import BatchTransform, CenterCropResize, RandomResizedCropFlip

BILINEAR = Image.Resampling.BILINEAR
Draw = tuple[int, int, int, int, bool]  # top, left, height, width, flip
Resize = Callable[[np.ndarray, np.ndarray, bool], None]  # crop (HWC), out (CHW), flip
NO_EXTRA = "no extra"

# The candidates read ``pixels`` records in place, as packer does; torch only reads them.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)


def decoded(data: bytes) -> np.ndarray:
    """The full-size RGB pixels of a stored record, as ``decode=True`` gives them."""
    array = pixels_array(data)
    if array is not None:
        return array
    with Image.open(io.BytesIO(data)) as image:
        return np.array(image.convert("RGB"))


def train_draws(sizes: list[tuple[int, int]]) -> list[Draw]:
    """The crops and flips ``RandomResizedCropFlip`` draws after ``torch.manual_seed(0)``."""
    torch.manual_seed(0)
    draws = []
    for width, height in sizes:
        top, left, h, w = random_resized_crop_params(width, height)
        draws.append((top, left, h, w, torch.rand(1).item() < 0.5))
    return draws


def time_pass(run: Callable[[], object]) -> float:
    """CPU seconds this process spent in ``run`` (one thread: other processes' turns on a
    shared machine do not count, as they would in wall time)."""
    started = time.process_time()
    run()
    return time.process_time() - started


def interleaved(rows: dict[str, Callable[[], object]], repeats: int, count: int) -> dict[str, float]:
    """Median ms per item of each row, rows alternating in order between repetitions."""
    times: dict[str, list[float]] = {name: [] for name in rows}
    for rep in range(repeats):
        for name in rows if rep % 2 == 0 else reversed(rows):
            times[name].append(time_pass(rows[name]) * 1e3 / count)
    return {name: statistics.median(values) for name, values in times.items()}


def batches(transform: BatchTransform, payloads: list[bytes], batch: int, seed: bool) -> torch.Tensor:
    """The transform over all payloads, ``batch`` at a time (as a packed dataset hands them)."""
    if seed:
        torch.manual_seed(0)
    return torch.cat([transform.batch(payloads[i:i + batch]) for i in range(0, len(payloads), batch)])


def reference_train(array: np.ndarray, draw: Draw, size: tuple[int, int]) -> np.ndarray:
    top, left, h, w, flip = draw
    image = Image.fromarray(array[top:top + h, left:left + w]).resize((size[1], size[0]), BILINEAR)
    pixels: np.ndarray = np.asarray(image.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if flip else image)
    return pixels.transpose(2, 0, 1)


def reference_eval(array: np.ndarray, size: tuple[int, int], resize: int) -> np.ndarray:
    (new_h, new_w), box = center_crop_geometry(array.shape[1], array.shape[0], size, resize)
    image = Image.fromarray(array).resize((new_w, new_h), BILINEAR).crop(box)
    pixels: np.ndarray = np.asarray(image)
    return pixels.transpose(2, 0, 1)


def packer_resize(crop: np.ndarray, out: np.ndarray, flip: bool, *, resampler: str) -> None:
    """packer's own resize step (:func:`packer.read.resampling.resize_into`)."""
    resize_into(crop, out, flip=flip, resampler=resampler)


def torch_plain(crop: np.ndarray, out: np.ndarray, flip: bool) -> None:
    """Candidate: torch's bilinear kernel without antialiasing (the same filter when enlarging)."""
    chw = torch.from_numpy(crop).permute(2, 0, 1).unsqueeze(0)
    resized = torch.nn.functional.interpolate(chw, size=out.shape[1:], mode="bilinear", antialias=False,
                                              align_corners=False)[0]
    torch.from_numpy(out).copy_(resized.flip(-1) if flip else resized)


def pillow(crop: np.ndarray, out: np.ndarray, flip: bool) -> None:
    """Candidate: Pillow's bilinear resize of the crop, torchvision's own pixels."""
    image = Image.fromarray(np.ascontiguousarray(crop)).resize((out.shape[2], out.shape[1]), BILINEAR)
    planar = np.asarray(image).transpose(2, 0, 1)
    np.copyto(out, planar[:, :, ::-1] if flip else planar)


def mad(got: np.ndarray | torch.Tensor, expected: list[np.ndarray]) -> tuple[float, int]:
    """Mean and largest absolute difference, in levels."""
    diff = np.abs(np.asarray(got, dtype=np.int16) - np.stack(expected).astype(np.int16))
    return float(diff.mean()), int(diff.max())


def measure(args: argparse.Namespace, resamplers: list[str]) -> dict[str, Any]:
    """Every figure of the report (see the module docstring), as a JSON-ready dict."""
    payloads = load_payloads(args.path, args.limit)
    arrays = [decoded(data) for data in payloads]
    sizes = [(a.shape[1], a.shape[0]) for a in arrays]
    n, size = len(payloads), (args.size, args.size)
    setups = {r: {"resampler": r, "decoder": "auto"} for r in resamplers}
    if speedups.simplejpeg() is not None:  # what runs without the fast extra: Pillow decodes
        setups[NO_EXTRA] = {"resampler": "torch", "decoder": "pil"}
    train = {name: RandomResizedCropFlip(args.size, resampler=options["resampler"],
                                         decoder=options["decoder"]) for name, options in setups.items()}
    evals = {name: CenterCropResize(args.size, args.resize, resampler=options["resampler"],
                                    decoder=options["decoder"]) for name, options in setups.items()}
    rows: dict[str, Callable[[], object]] = {}
    for name in setups:
        rows[f"train {name}"] = functools.partial(batches, train[name], payloads, args.batch, seed=True)
        rows[f"eval {name}"] = functools.partial(batches, evals[name], payloads, args.batch, seed=False)
    transforms = interleaved(rows, args.repeats, n)

    draws = train_draws(sizes)
    enlarged = [k for k, (_, _, h, w, _) in enumerate(draws) if h <= size[0] and w <= size[1]]
    expected_train = [reference_train(a, d, size) for a, d in zip(arrays, draws, strict=True)]
    expected_eval = [reference_eval(a, size, args.resize) for a in arrays]
    fidelity = {}
    for r in resamplers:
        got_train = batches(train[r], payloads, args.batch, seed=True).numpy()
        got_eval = batches(evals[r], payloads, args.batch, seed=False).numpy()
        fidelity[r] = {"train": mad(got_train, expected_train)[0], "eval": mad(got_eval, expected_eval)[0],
                       "train_enlarged": (mad(got_train[enlarged], [expected_train[k] for k in enlarged])[0]
                                          if enlarged else None)}

    report: dict[str, Any] = {
        "source": args.path, "images": n, "size": args.size, "resize": args.resize, "repeats": args.repeats,
        "median_size": [int(statistics.median(s)) for s in zip(*sizes, strict=True)],
        "accelerators": speedups.accelerators(), "resamplers": resamplers, "setups": setups,
        "transforms": {kind: {name: transforms[f"{kind} {name}"] for name in setups}
                       for kind in ("train", "eval")},
        "enlarged_share": len(enlarged) / n, "enlarged_images": len(enlarged), "fidelity": fidelity,
    }
    if enlarged:
        report["enlarged"] = enlarged_rows(args, payloads, arrays, draws, enlarged, resamplers,
                                           [expected_train[k] for k in enlarged])
    return report


def enlarged_rows(args: argparse.Namespace, payloads: list[bytes], arrays: list[np.ndarray],
                  draws: list[Draw], enlarged: list[int], resamplers: list[str],
                  expected: list[np.ndarray]) -> dict[str, Any]:
    """The fused op and the resize step alone, on the train crops enlarged on both axes."""
    picked = [(payloads[k], draws[k]) for k in enlarged]

    def fused(resampler: str) -> None:
        for data, (top, left, h, w, flip) in picked:
            crop_resize(data, (left, top, left + w, top + h), args.size, flip=flip, resampler=resampler)

    crops = [(arrays[k][t:t + h, j:j + w], flip)
             for k, (t, j, h, w, flip) in ((k, draws[k]) for k in enlarged)]
    out = np.empty((len(crops), 3, args.size, args.size), dtype=np.uint8)
    steps: dict[str, Resize] = {f"{r} (packer)": functools.partial(packer_resize, resampler=r)
                                for r in resamplers}
    steps["torch plain bilinear"] = torch_plain
    steps["pillow bilinear"] = pillow

    def step(resize: Resize) -> None:
        for position, (crop, flip) in enumerate(crops):
            resize(crop, out[position], flip)

    rows: dict[str, Callable[[], object]] = {f"fused {r}": functools.partial(fused, r) for r in resamplers}
    rows.update({f"step {name}": functools.partial(step, resize) for name, resize in steps.items()})
    timed = interleaved(rows, args.repeats, len(crops))
    resize_rows = {}
    for name, resize in steps.items():
        step(resize)
        difference, largest = mad(out, expected)
        resize_rows[name] = {"ms": timed[f"step {name}"], "mad": difference, "max": largest}
    return {"fused": {r: timed[f"fused {r}"] for r in resamplers}, "resize": resize_rows}


def speedup(figures: dict[str, float], baseline: str = "torch") -> str:
    """How many times faster OpenCV's row is than ``baseline``'s, or ``-``."""
    if "opencv" not in figures or baseline not in figures:
        return "-"
    return f"{figures[baseline] / figures['opencv']:.2f}x"


def print_report(report: dict[str, Any]) -> None:
    width, height = report["median_size"]
    acc = report["accelerators"]
    print(f"{report['images']} images from {report['source']} (median {width}x{height}), output "
          f"{report['size']}, resize {report['resize']}, {report['repeats']} interleaved repeats, "
          "1 torch thread, CPU time")
    print(f"accelerators: opencv {acc['opencv'] or 'not installed'}, simplejpeg "
          f"{acc['simplejpeg'] or 'not installed'}")
    names, setups = report["resamplers"], list(report["setups"])
    columns = "; ".join(f"{name}: " + ", ".join(f"{key}={value!r}" for key, value in options.items())
                        for name, options in report["setups"].items())
    print(f"fast-path transforms, the same crops in every column ({columns})")
    print(f"  {'ms per image':<34}" + "".join(f"{name:>10}" for name in setups)
          + "   OpenCV's speedup   the extra's")
    for kind, label in (("train", "train RandomResizedCropFlip"), ("eval", "eval CenterCropResize")):
        figures = report["transforms"][kind]
        print(f"  {label:<34}" + "".join(f"{figures[name]:10.3f}" for name in setups)
              + f"   {speedup(figures):>16}   {speedup(figures, NO_EXTRA):>11}")
    print(f"train crops OpenCV resizes (enlarged on both axes): {report['enlarged_share']:.0%} of the draws "
          f"({report['enlarged_images']} images)")
    if "enlarged" in report:
        fused = report["enlarged"]["fused"]
        print(f"  {'fused crop_resize on them':<34}" + "".join(f"{fused[r]:10.3f}" for r in names)
              + f"   {speedup(fused):>16}")
        print("  the resize step alone on those crops, against torchvision's pixels:")
        print(f"  {'candidate':<34}{'ms/crop':>9}{'MAD':>7}{'max':>5}")
        for name, row in report["enlarged"]["resize"].items():
            print(f"  {name:<34}{row['ms']:9.3f}{row['mad']:7.2f}{row['max']:5d}")
    print("pixels against torchvision on PIL images (MAD, levels of 0-255): "
          "train all / train enlarged / eval")
    for name, row in report["fidelity"].items():
        enlarged = "-" if row["train_enlarged"] is None else f"{row['train_enlarged']:.2f}"
        print(f"  {name:<10} {row['train']:.2f} / {enlarged} / {row['eval']:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = transform_arguments(__doc__)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    resamplers = ["opencv", "torch"]
    if speedups.opencv() is None:
        print(f"OpenCV is not importable here: its rows are skipped (pip install '{speedups.FAST_EXTRA}' "
              "to measure them)", file=sys.stderr)
        resamplers = ["torch"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        report = measure(args, resamplers)
    finally:
        torch.set_num_threads(threads)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
