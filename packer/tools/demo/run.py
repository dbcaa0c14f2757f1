"""``packer demo``: the whole product path on a generated tree, no data of the user's needed.

It draws a small photo-like ImageFolder tree plus a few broken files
(:func:`~packer.tools.demo.tree.make_demo_tree`), packs it with every backend, reads each dataset
back through a DataLoader and checks every sample against the folder (pixels and stored bytes),
then times training-style loading against the folder in the same run (:func:`packer.tools.bench.bench`,
sides alternating): the standard PIL pipeline on each backend (on a warm local disk both sides
are decoding-bound, so close), packer's fast path (where the read side pays off on any disk),
and the standard pipeline with a cold page cache (what a new job on a cold machine sees).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from PIL import Image
from torch.utils.data import DataLoader, Dataset

from packer.conversion.run import ConversionResult, convert
from packer.errors import OutputError
from packer.format.backends import backend_names
from packer.read.baseline import ImageFolderDataset
from packer.read.opening import open_dataset
from packer.tools.bench import bench
from packer.tools.demo.tree import BROKEN_FILES, make_demo_tree

__all__ = ["BROKEN_FILES", "DemoReport", "SpeedRow", "make_demo_tree", "run_demo"]

DEMO_MARKER = ".packer-demo"
BATCH_SIZE = 32
REPEATS = 2


def pixel_digest(image: Image.Image) -> bytes:
    """A digest of an image's size and RGB pixels: cheap to send back from a worker."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(repr(image.size).encode())
    digest.update(image.tobytes())
    return digest.digest()


def _as_list(batch: list[Any]) -> list[Any]:
    return batch


@dataclass(frozen=True)
class SpeedRow:
    """One line of the speed table: a source read one way, and the folder read the standard way
    under the same cache, measured in the same run."""

    source: str
    pipeline: str
    cache: str
    images: int
    images_per_second: float
    folder_images_per_second: float

    @property
    def ratio(self) -> float:
        """This row over the folder's images/s."""
        base = self.folder_images_per_second
        return self.images_per_second / base if base else 0.0


@dataclass
class DemoReport:
    """What the demo did and found."""

    directory: str
    conversions: dict[str, ConversionResult]
    speeds: list[SpeedRow]
    mismatches: dict[str, int]
    byte_mismatches: dict[str, int]
    workers: int = 2
    expected_skips: dict[str, str] = field(default_factory=dict)
    batch_size: int = BATCH_SIZE
    repeats: int = REPEATS

    @property
    def ok(self) -> bool:
        """Every sample matched and exactly the planted broken files were skipped."""
        caught = all({s.path: s.reason for s in r.manifest.skipped} == self.expected_skips
                     for r in self.conversions.values())
        return caught and not any(self.mismatches.values()) and not any(self.byte_mismatches.values())


def _read_all(dataset: Dataset[Any], workers: int) -> list[Any]:
    """Every sample through one DataLoader, in order."""
    loader = DataLoader(dataset, batch_size=16, shuffle=False, num_workers=workers, collate_fn=_as_list)
    return [item for batch in loader for item in batch]


def _prepare(directory: str) -> None:
    if os.path.isdir(directory) and os.listdir(directory):
        if not os.path.exists(os.path.join(directory, DEMO_MARKER)):
            raise OutputError(f"Demo directory {directory!r} is not empty: give a new or empty "
                              "directory (or one an earlier `packer demo` made).")
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
    os.makedirs(directory, exist_ok=True)
    open(os.path.join(directory, DEMO_MARKER), "w").close()


def _speeds(images: str, datasets: dict[str, str], workers: int) -> list[SpeedRow]:
    """The speed table: each backend's standard and fast pipelines, warm, then the first
    backend's standard pipeline cold, each against the folder measured alongside it."""
    rows: list[SpeedRow] = []
    common: dict[str, Any] = {"workers": workers, "batch_size": BATCH_SIZE, "repeats": REPEATS}
    baseline = None
    for name, dst in datasets.items():
        report = bench(dst, against=images if baseline is None else None, pipeline="train", **common)
        if baseline is None and report.folder is not None:
            baseline = report.folder.images_per_second
            rows.append(SpeedRow("folder", "standard", "warm", report.folder.images, baseline, baseline))
        rows.append(SpeedRow(name, "standard", "warm", report.packed.images,
                             report.packed.images_per_second, baseline or 0.0))
    for name, dst in datasets.items():
        report = bench(dst, pipeline="fast", **common)
        rows.append(SpeedRow(name, "fast path", "warm", report.packed.images,
                             report.packed.images_per_second, baseline or 0.0))
    name = "lmdb" if "lmdb" in datasets else next(iter(datasets))
    dst = datasets[name]
    cold = bench(dst, against=images, pipeline="train", cold=True, **common)
    if cold.folder is not None:
        folder = cold.folder.images_per_second
        rows.append(SpeedRow("folder", "standard", "cold", cold.folder.images, folder, folder))
        rows.append(SpeedRow(name, "standard", "cold", cold.packed.images, cold.packed.images_per_second,
                             folder))
    return rows


def run_demo(directory: str | None = None, *, workers: int = 2, per_class: int = 75,
             progress: bool = False, timed: bool = True) -> DemoReport:
    """Generate, convert with every backend, read back, check and time; see the module doc.

    With ``directory`` the tree and datasets stay there (``images/``, ``lmdb/``, ``hdf5/``);
    without it they go to a temporary directory that is removed afterwards. ``timed=False``
    skips the speed table.

    Raises:
        OutputError: ``directory`` is not empty and was not made by an earlier demo.
    """
    if directory is None:
        with tempfile.TemporaryDirectory(prefix="packer-demo-") as scratch:
            return run_demo(scratch, workers=workers, per_class=per_class, progress=progress, timed=timed)
    _prepare(directory)
    images = os.path.join(directory, "images")
    make_demo_tree(images, per_class=per_class)
    conversions = {name: convert(images, os.path.join(directory, name), to=name,
                                 shard_size="4MB", progress=progress)
                   for name in backend_names()}
    skipped = {s.path for r in conversions.values() for s in r.manifest.skipped}
    reference = _read_all(ImageFolderDataset(images, transform=pixel_digest, exclude=skipped), workers)
    mismatches: dict[str, int] = {}
    byte_mismatches: dict[str, int] = {}
    for name, result in conversions.items():
        got = _read_all(open_dataset(result.dst, transform=pixel_digest), workers)
        mismatches[name] = _count_mismatches(reference, got)
        raw = open_dataset(result.dst, decode=False)
        byte_mismatches[name] = sum(
            1 for i, (relpath, _) in enumerate(raw.samples)
            if raw[i][0] != _file_bytes(os.path.join(images, relpath)))
    speeds = _speeds(images, {name: r.dst for name, r in conversions.items()}, workers) if timed else []
    return DemoReport(directory, conversions, speeds, mismatches, byte_mismatches,
                      workers=workers, expected_skips=dict(BROKEN_FILES))


def _count_mismatches(reference: Sequence[Any], got: Sequence[Any]) -> int:
    common = min(len(reference), len(got))
    differing = sum(1 for i in range(common) if reference[i] != got[i])
    return differing + abs(len(reference) - len(got))


def _file_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


