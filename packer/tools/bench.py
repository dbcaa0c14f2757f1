"""``packer bench``: how fast a packed dataset loads, against its source folder read the same way.

Three pipelines, each what a training job would run in its DataLoader workers:

* ``bytes``: the stored bytes only (``decode=False``), so storage and Python overheads alone;
* ``train``: the standard torchvision-style PIL pipeline, restated without torchvision: decode,
  ``RandomResizedCrop(224)``, horizontal flip, float32 tensor, per-image normalisation;
* ``fast``: packer's fast path: fused decode-crop-resize to ``uint8`` in the workers
  (:class:`packer.read.transforms.RandomResizedCropFlip`) and one :class:`Normalize` per batch in the
  main process (on the CPU here, on the GPU in training; see :class:`BatchNormalizer`), so both
  sides yield the same normalised float batches.

With ``against``, the source folder is read by :class:`packer.read.baseline.ImageFolderDataset` with the
``train`` pipeline (``bytes`` when benchmarking bytes): the baseline training jobs have today.
Repetitions alternate the two sides so that machine noise hits both; the figures are medians
with min-max, and the ratio is of medians. Each side's workers persist across its epochs and
its first epoch (worker start-up, warm-up) is not timed.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, Subset

from packer.read.baseline import ImageFolderDataset
from packer.read.datasets import PackedImageDataset
from packer.read.loader import available_cpus
from packer.read.opening import open_dataset
from packer.read.transforms import IMAGENET_MEAN, IMAGENET_STD, Normalize, RandomResizedCropFlip
from packer.read.transforms import random_resized_crop_params as crop_params
from packer.tools.consistency import require_images_and_classes

__all__ = ["PIPELINES", "BatchNormalizer", "BenchReport", "Timing", "bench", "consume", "drop_page_cache"]

PIPELINES: Final[tuple[str, ...]] = ("bytes", "train", "fast")


class StandardTrainTransform:
    """torchvision's ``RandomResizedCrop(size)`` + flip + ``ToTensor`` + ``Normalize``, on PIL."""

    def __init__(self, size: int = 224) -> None:
        self.size = size
        self._mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
        self._std = torch.tensor(IMAGENET_STD).view(3, 1, 1)

    def __call__(self, image: Image.Image) -> torch.Tensor:
        top, left, height, width = crop_params(*image.size)
        image = image.resize((self.size, self.size), Image.Resampling.BILINEAR,
                             box=(left, top, left + width, top + height))
        if torch.rand(1).item() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        tensor = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1)
        return (tensor.float().div_(255) - self._mean) / self._std


def _count_bytes(batch: list[tuple[bytes, int]]) -> int:
    return sum(len(sample) for sample, _ in batch)


@dataclass(frozen=True)
class Timing:
    """One side's timed epochs."""

    name: str
    images: int
    megabytes: float
    seconds: list[float] = field(default_factory=list)

    @property
    def images_per_second(self) -> float:
        """Median images per second."""
        return self.images / statistics.median(self.seconds)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready figures."""
        return {**asdict(self), "images_per_second": self.images_per_second,
                "mb_per_second": self.megabytes / statistics.median(self.seconds),
                "min_images_per_second": self.images / max(self.seconds),
                "max_images_per_second": self.images / min(self.seconds)}


@dataclass(frozen=True)
class BenchReport:
    """What :func:`bench` measured: the packed side, maybe the folder, and their ratio."""

    pipeline: str
    workers: int
    batch_size: int
    packed: Timing
    folder: Timing | None
    cold: bool = False

    @property
    def ratio(self) -> float | None:
        """Packed images/s over folder images/s (medians), when a folder was read."""
        return None if self.folder is None else self.packed.images_per_second / self.folder.images_per_second

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready report."""
        return {"pipeline": self.pipeline, "workers": self.workers, "batch_size": self.batch_size,
                "cold": self.cold,
                "packed": self.packed.to_dict(),
                "folder": None if self.folder is None else self.folder.to_dict(), "ratio": self.ratio}


def _packed_side(reference: PackedImageDataset,
                 pipeline: str) -> tuple[Dataset[Any], Callable[[Any], Any] | None]:
    """The packed dataset as ``pipeline`` reads it (``reference``: opened plainly, reused)."""
    if pipeline == "bytes":
        reference.decode = False
        return reference, _count_bytes
    if pipeline == "train":
        reference.transform = StandardTrainTransform()
        return reference, None
    # The fused path starts from the stored bytes, whatever the codec (pixels are read in place).
    reference.transform = RandomResizedCropFlip(224)
    reference.decode = False
    return reference, None


def _folder_side(src: str, pipeline: str, packed: PackedImageDataset) -> ImageFolderDataset:
    skipped = {s.path for s in packed.manifest.skipped}
    hidden = packed.manifest.scan.include_hidden
    if pipeline == "bytes":
        return ImageFolderDataset(src, decode=False, exclude=skipped, include_hidden=hidden)
    return ImageFolderDataset(src, transform=StandardTrainTransform(), exclude=skipped,
                              include_hidden=hidden)


def _subset(dataset: Dataset[Any], limit: int | None) -> Dataset[Any]:
    size = len(dataset)  # type: ignore[arg-type]
    if limit is None or limit >= size:
        return dataset
    order = torch.randperm(size, generator=torch.Generator().manual_seed(0))[:limit]
    return Subset(dataset, sorted(order.tolist()))


class BatchNormalizer:
    """The fast path's main-process step: :class:`Normalize` each batch into one reused buffer.

    This is what a CPU training loop should do (a GPU one normalises on the device): reusing
    ``out`` spares a fresh 38 MB allocation per batch of 64, and :meth:`threads` keeps torch's
    intra-op threads in the main process to the cores the ``workers`` leave free (at least one),
    since threads beyond that only contend with the workers (on 2 cores with 2 workers:
    2,190 images/s with one thread, 1,630 with two, pixels 256 fast path).
    """

    def __init__(self, workers: int, normalize: Normalize | None = None) -> None:
        self.normalize = normalize or Normalize()
        self._threads = max(1, available_cpus() - workers)
        self._buffer: torch.Tensor | None = None

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """The normalised batch (valid until the next call)."""
        if self._buffer is None or self._buffer.shape[1:] != images.shape[1:] \
                or len(self._buffer) < len(images):
            self._buffer = torch.empty(images.shape, dtype=self.normalize.dtype)
        normalized: torch.Tensor = self.normalize(images, out=self._buffer[:len(images)])
        return normalized

    @contextmanager
    def threads(self) -> Iterator[None]:
        """Within: torch's intra-op thread count set to the free cores; restored after."""
        before = torch.get_num_threads()
        torch.set_num_threads(self._threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)


def drop_page_cache(paths: Iterable[str]) -> None:
    """Ask the kernel to forget the cached pages of ``paths`` (``POSIX_FADV_DONTNEED``), so the
    next read comes from the disk: a cold cache without root. Pages some process still maps
    or has dirty stay; where ``posix_fadvise`` is missing (macOS) nothing happens."""
    if not hasattr(os, "posix_fadvise"):
        return
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class _Side:
    """A dataset, its loader, and the per-batch work done in the main process.

    Warm: the loader's workers persist and the page cache keeps the files. Cold: before each
    epoch ``files`` leave the page cache and a fresh loader starts (no worker keeps a shard
    mapped), as a new training job on a cold machine would.
    """

    def __init__(self, name: str, dataset: Dataset[Any], *, workers: int, batch_size: int,
                 prefetch_factor: int, persistent: bool, collate: Callable[[Any], Any] | None,
                 normalize: bool, megabytes: float, cold_files: list[str] | None = None) -> None:
        self.timing = Timing(name, len(dataset), megabytes)  # type: ignore[arg-type]
        self._normalizer = BatchNormalizer(workers) if normalize else None
        self._cold_files = cold_files

        def loader() -> DataLoader[Any]:
            return DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                              prefetch_factor=prefetch_factor if workers else None,
                              persistent_workers=persistent and workers > 0 and cold_files is None,
                              collate_fn=collate)

        self._make_loader = loader
        self._loader = loader()

    def epoch(self) -> float:
        if self._cold_files is not None:
            drop_page_cache(self._cold_files)
            self._loader = self._make_loader()
        started = time.perf_counter()
        consume(self._loader, self._normalizer)
        return time.perf_counter() - started


def consume(loader: Iterable[Any], normalizer: BatchNormalizer | None = None) -> None:
    """Read one epoch of ``loader`` as a training loop would, normalising each batch's images
    (its first item) in this process when the fast path asks for it."""
    if normalizer is None:
        for _ in loader:
            pass
        return
    with normalizer.threads():
        for batch in loader:
            normalizer(batch[0])


def _megabytes(dataset: PackedImageDataset) -> float:
    return sum(s.num_bytes for s in dataset.manifest.shards) / 1e6


def _dataset_files(dataset: PackedImageDataset) -> list[str]:
    manifest = dataset.manifest
    paths = [shard.path for shard in manifest.shards]
    paths += [entry.path for entry in manifest.sample_index.values()]
    return [os.path.join(dataset.root, path) for path in paths]


def bench(dst: str | os.PathLike[str], *, against: str | os.PathLike[str] | None = None,
          pipeline: str = "train", workers: int = 2, batch_size: int = 64, repeats: int = 3,
          prefetch_factor: int = 2, persistent_workers: bool = True,
          limit: int | None = None, cold: bool = False) -> BenchReport:
    """Time ``repeats`` epochs of the packed dataset (and of ``against``, alternating).

    ``limit`` reads a fixed random subset of that many samples (the same on both sides).
    ``cold`` drops each side's files from the page cache before each of its epochs and starts
    fresh workers (see :func:`drop_page_cache`): what the first epoch of a new job sees.

    Raises:
        ValueError: unknown ``pipeline`` or non-positive counts.
        NotADatasetError, IncompleteDatasetError, ShardError: ``dst`` is not a complete dataset.
    """
    if pipeline not in PIPELINES:
        raise ValueError(f"pipeline must be one of {', '.join(PIPELINES)}, not {pipeline!r}")
    if repeats < 1 or batch_size < 1 or workers < 0:
        raise ValueError("repeats and batch_size must be at least 1, workers at least 0")
    reference = open_dataset(dst)
    require_images_and_classes(reference.manifest, reference.root, "packer bench")
    packed, collate = _packed_side(reference, pipeline)
    fraction = 1.0 if limit is None else min(1.0, limit / max(1, len(reference)))
    sides = [_Side("packed", _subset(packed, limit), workers=workers, batch_size=batch_size,
                   prefetch_factor=prefetch_factor, persistent=persistent_workers,
                   collate=collate, normalize=pipeline == "fast",
                   megabytes=_megabytes(reference) * fraction,
                   cold_files=_dataset_files(reference) if cold else None)]
    if against is not None:
        folder = _folder_side(os.fspath(against), pipeline, reference)
        source_mb = sum(os.path.getsize(path) for path, _ in folder.samples) / 1e6
        sides.append(_Side("folder", _subset(folder, limit), workers=workers, batch_size=batch_size,
                           prefetch_factor=prefetch_factor, persistent=persistent_workers,
                           collate=collate, normalize=False, megabytes=source_mb * fraction,
                           cold_files=[path for path, _ in folder.samples] if cold else None))
    if not cold:
        for side in sides:
            side.epoch()  # start the workers, warm the page cache
    for _ in range(repeats):
        for side in sides:
            side.timing.seconds.append(side.epoch())
    return BenchReport(pipeline, workers, batch_size, sides[0].timing,
                       sides[1].timing if len(sides) > 1 else None, cold)


