"""Whole batches from a :class:`~packer.transforms.BatchTransform` to the training loop, uncopied.

A DataLoader worker normally collates each batch by stacking its samples into a fresh shared
memory tensor (a copy of every image) and sends that to the main process. When a packed
dataset's batch transform has already written the batch into one tensor (``decode=False`` and
packer's fast transforms), that copy is waste. So the dataset writes the batch straight into
shared memory (in a worker) and returns samples (:class:`BatchSample`) that are plain ``(image, target)``
tuples to any code that looks, each image a view of that one tensor. Registered with torch's
``default_collate`` (its documented extension point, ``default_collate_fn_map``), they collate
to that tensor itself, with no copy; the targets collate as usual. A custom ``collate_fn`` sees
ordinary tuples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.data import get_worker_info
from torch.utils.data._utils.collate import collate, collate_tensor_fn, default_collate_fn_map

__all__ = ["BatchSample", "batch_samples", "new_batch_tensor"]


class BatchSample(tuple[Any, ...]):
    """``(image, target)``, where ``image`` is ``images[position]`` of one batch tensor."""

    images: torch.Tensor
    position: int


def new_batch_tensor(shape: Sequence[int], dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """An uninitialised tensor for a whole batch: in shared memory inside a DataLoader worker
    (where default_collate would have put the batch), ordinary memory elsewhere."""
    if get_worker_info() is None:
        return torch.empty(tuple(shape), dtype=dtype)
    numel = 1
    for side in shape:
        numel *= side
    storage = torch.UntypedStorage._new_shared(numel * dtype.itemsize)
    return torch.empty(0, dtype=dtype).set_(storage).view(tuple(shape))


def batch_samples(images: torch.Tensor, targets: Sequence[Any]) -> list[BatchSample]:
    """One :class:`BatchSample` per row of ``images``, paired with its target."""
    samples = []
    for position, (image, target) in enumerate(zip(images, targets, strict=True)):
        sample = BatchSample((image, target))
        sample.images, sample.position = images, position
        samples.append(sample)
    return samples


def _collate_batch_samples(batch: Sequence[BatchSample], *,
                           collate_fn_map: dict[type | tuple[type, ...], Callable[..., Any]] | None = None
                           ) -> list[Any]:
    """The images of a whole, in-order batch uncopied; anything else as default_collate would."""
    images = batch[0].images
    whole = len(batch) == len(images) and all(
        isinstance(sample, BatchSample) and sample.images is images and sample.position == position
        for position, sample in enumerate(batch))
    targets = collate([sample[1] for sample in batch], collate_fn_map=collate_fn_map)
    if whole:
        return [images, targets]
    return [collate_tensor_fn([sample[0] for sample in batch], collate_fn_map=collate_fn_map), targets]


default_collate_fn_map[BatchSample] = _collate_batch_samples
