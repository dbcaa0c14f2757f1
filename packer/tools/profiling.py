"""``packer bench --profile``: where each image's time goes on its way to the training step.

Each stage is timed on its own, in this process, as CPU milliseconds per image, after one
untimed pass over the same samples (a warm page cache, as training sees from its second epoch):

* ``read``: the stored bytes out of the shards (one read per shard per batch);
* ``decode``: the header, the crop's draw, and RGB pixels (a JPEG at a reduced scale when the
  crop allows; a ``pixels`` record is read in place);
* ``crop/resize``: crop, resize, flip, into the batch's layout (and, for the standard pipeline,
  ``ToTensor`` + ``Normalize`` per image in the worker);
* ``collate+transfer``: one batch through a real DataLoader worker into this process
  (collation, shared memory, the queue), measured with batches that cost nothing to make;
* ``normalise``: the fast path's batch :class:`~packer.read.normalize.Normalize` in this process.

Then the whole pipeline runs through a DataLoader with ``workers`` workers: the measured rate
against the ceiling that the stages' sum and the usable cores allow shows how much goes to
contention and waiting rather than work.
"""

from __future__ import annotations

import io
import resource
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from packer.cpus import available_cpus
from packer.read.batching import batch_samples, new_batch_tensor
from packer.read.crop_resize import decode_for, resample
from packer.read.decoding import open_picture
from packer.read.opening import open_dataset
from packer.read.transforms import RandomResizedCropFlip
from packer.tools.bench import BatchNormalizer, StandardTrainTransform, bench
from packer.tools.consistency import require_images_and_classes

__all__ = ["STAGES", "LoadProfile", "profile_loading"]

STAGES = ("read", "decode", "crop/resize", "collate+transfer", "normalise")


@dataclass(frozen=True)
class LoadProfile:
    """Milliseconds of CPU per image for each stage, and the whole pipeline's measured rate."""

    pipeline: str
    description: str
    images: int
    batch_size: int
    workers: int
    cpus: int
    stages: dict[str, float] = field(default_factory=dict)
    images_per_second: float = 0.0

    @property
    def total(self) -> float:
        """CPU milliseconds per image, all stages."""
        return sum(self.stages.values())

    @property
    def ceiling(self) -> float:
        """Images per second the stages allow if every usable core did nothing else."""
        return 1000.0 * min(self.cpus, self.workers + 1) / self.total if self.total else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready figures."""
        return {"pipeline": self.pipeline, "description": self.description, "images": self.images,
                "batch_size": self.batch_size, "workers": self.workers, "cpus": self.cpus,
                "ms_per_image": dict(self.stages), "total_ms_per_image": self.total,
                "ceiling_images_per_second": self.ceiling, "images_per_second": self.images_per_second}


class _Clock:
    """Accumulates CPU time per stage (``time.thread_time``: this thread's work only)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(STAGES, 0.0)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.thread_time()
        try:
            yield
        finally:
            self.seconds[name] += time.thread_time() - started


class _ReadyBatches(Dataset[Any]):
    """Batches that cost nothing to make, shaped as ``pipeline`` makes them, to time transport."""

    def __init__(self, pipeline: str, size: int, count: int) -> None:
        self.pipeline, self.size, self.count = pipeline, size, count

    def __len__(self) -> int:
        return self.count

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        if self.pipeline == "fast":
            images = new_batch_tensor((len(indices), 3, self.size, self.size))
            images.fill_(128)  # the transform writes every byte of it, as here
            return batch_samples(images, [0] * len(indices))
        return [(torch.zeros(3, self.size, self.size), 0) for _ in indices]


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _transfer_ms(pipeline: str, size: int, batch_size: int, images: int) -> float:
    """CPU ms per image (worker and this process) to bring ready batches through one worker."""
    loader = DataLoader(_ReadyBatches(pipeline, size, images), batch_size=batch_size, num_workers=1)
    started = _cpu_seconds()
    for _ in loader:
        pass
    del loader  # the worker exits and is reaped, so RUSAGE_CHILDREN holds its time
    return 1000.0 * (_cpu_seconds() - started) / images


def _fast_stages(payloads: list[memoryview], clock: _Clock, transform: RandomResizedCropFlip) -> None:
    out = np.empty((3, *transform.size), dtype=np.uint8)
    for payload in payloads:
        with clock.stage("decode"):
            picture = open_picture(payload, transform.decoder)
            i, j, h, w = transform.get_params(picture.width, picture.height)
            box = (j, i, j + w, i + h)
            decoded, applied = decode_for(picture, box, transform.size, draft_gap=transform.draft_gap,
                                          resampler=transform.resampler)
        with clock.stage("crop/resize"):
            flip = torch.rand(1).item() < transform.flip_p
            resample(decoded, applied, box, out, flip=flip, resampler=transform.resampler)
        picture.close()


def _standard_stages(payloads: list[bytes], clock: _Clock, transform: StandardTrainTransform) -> None:
    for payload in payloads:
        with clock.stage("decode"):
            image = Image.open(io.BytesIO(payload)).convert("RGB")
        with clock.stage("crop/resize"):
            transform(image)


def profile_loading(dst: str, *, pipeline: str = "fast", images: int = 512, batch_size: int = 64,
                    workers: int = 2) -> LoadProfile:
    """Time each stage of ``pipeline`` (``"fast"`` or ``"train"``) on a fixed random subset of
    ``images`` samples of ``dst``, then the whole pipeline through a DataLoader.

    Raises:
        ValueError: unknown ``pipeline`` or non-positive counts.
        NotADatasetError, IncompleteDatasetError, ShardError: ``dst`` is not a complete dataset.
    """
    if pipeline not in ("fast", "train"):
        raise ValueError(f"pipeline must be 'fast' or 'train' to profile, not {pipeline!r}")
    if images < 1 or batch_size < 1 or workers < 0:
        raise ValueError("images and batch_size must be at least 1, workers at least 0")
    dataset = open_dataset(dst, decode=False)
    require_images_and_classes(dataset.manifest, dataset.root, "profile_loading()")
    count = min(images, len(dataset))
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))[:count].tolist()
    batches = [order[first:first + batch_size] for first in range(0, count, batch_size)]
    fast = RandomResizedCropFlip(224)
    standard = StandardTrainTransform()
    for batch in batches:  # warm the page cache and the read memory, untimed
        dataset._shards.read_batch(batch)
    clock = _Clock()
    torch.manual_seed(0)
    for batch in batches:
        if pipeline == "fast":
            with clock.stage("read"):
                views = dataset._shards.read_batch(batch)
            _fast_stages(views, clock, fast)
        else:
            with clock.stage("read"):
                payloads = dataset._shards.read_many(batch)
            _standard_stages(payloads, clock, standard)
    if pipeline == "fast":
        normalizer = BatchNormalizer(workers)
        batch_tensor = torch.randint(0, 256, (batch_size, 3, 224, 224), dtype=torch.uint8)
        with normalizer.threads(), clock.stage("normalise"):
            for _ in batches:
                normalizer(batch_tensor)
    stages = {name: 1000.0 * seconds / count for name, seconds in clock.seconds.items()}
    stages["collate+transfer"] = _transfer_ms(pipeline, 224, batch_size, max(count, 128 * batch_size))
    if pipeline == "train":
        del stages["normalise"]  # done per image inside crop/resize (ToTensor + Normalize)
    report = bench(dst, pipeline=pipeline, workers=workers, batch_size=batch_size, repeats=2, limit=count)
    description = (repr(fast) if pipeline == "fast"
                   else "PIL decode, RandomResizedCrop(224) + flip, ToTensor + Normalize per image")
    return LoadProfile(pipeline, description, count, batch_size, workers, available_cpus(), stages,
                       report.packed.images_per_second)
