"""Whole batches from a :class:`~packer.read.transforms.BatchTransform` to the training loop, uncopied.

A DataLoader worker normally collates each batch by stacking its samples into a fresh shared
memory tensor (a copy of every image) and sends that to the main process. When a packed
dataset's batch transform has already written the batch into one tensor (``decode=False`` and
packer's fast transforms), that copy is waste. So the dataset writes the batch straight into
shared memory (in a worker) and returns samples (:class:`BatchSample`) that are plain
``(image, target)`` tuples to any code that looks, each image a view of that one tensor.
Registered with torch's ``default_collate`` (its documented extension point,
``default_collate_fn_map``), they collate to that tensor itself, with no copy; the targets
collate as usual. A custom ``collate_fn`` sees ordinary tuples.

Fresh shared memory is costly too: every 4 KB page of it faults once when first written
(measured: 0.2 ms of kernel time per 224x224 image, a fifth of the whole fast path). So each
worker keeps a few batch buffers (:data:`POOL_SIZE`) and writes a new batch into one that the
training process has let go of. The training process is told which buffer a batch lies in when
it unpickles the batch; when its last reference to that memory dies (the batch and every view
of it), a finalizer marks the buffer free in a small flag array both processes share. A buffer
is only ever rewritten after that, so a batch never changes under the training loop. One case
it cannot see: a batch the training process hands on to a third process (through a
``torch.multiprocessing`` queue) and then drops while that process still reads it; clone such a
batch first, or turn reuse off with ``reuse_batch_memory(False)``.
"""

from __future__ import annotations

import os
import secrets
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final

import torch
from torch.utils.data import get_worker_info
from torch.utils.data._utils.collate import collate, collate_tensor_fn, default_collate_fn_map

__all__ = ["POOL_SIZE", "BatchSample", "batch_samples", "new_batch_tensor", "reuse_batch_memory"]

#: Batch buffers each DataLoader worker keeps for reuse; beyond them batches get fresh memory.
POOL_SIZE: Final = 4

_reuse = True


class BatchSample(tuple[Any, ...]):
    """``(image, target)``, where ``image`` is ``images[position]`` of one batch tensor."""

    images: torch.Tensor
    position: int


def reuse_batch_memory(enabled: bool) -> None:
    """Turn the reuse of batch buffers on (the default) or off, in this process and in the
    DataLoader workers it starts afterwards."""
    global _reuse
    _reuse = bool(enabled)


class _PooledImages(torch.Tensor):
    """A batch in one of a worker's buffers; pickles as a plain tensor plus where it lies."""

    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]  # plain results
    _slot: int
    _pool: _Pool

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (_received, (self.as_subclass(torch.Tensor), self._pool.flags, self._slot))


class _Pool:
    """This worker's batch buffers and the flags saying which the training process still holds."""

    def __init__(self) -> None:
        self.flags: torch.Tensor = torch.zeros(POOL_SIZE, dtype=torch.uint8).share_memory_()  # type: ignore[no-untyped-call]
        self.buffers: list[torch.UntypedStorage | None] = [None] * POOL_SIZE
        self.token = secrets.token_hex(8)

    def take(self, nbytes: int) -> tuple[int, torch.UntypedStorage] | None:
        """A free buffer of at least ``nbytes`` (made if a slot is empty), now marked held."""
        flags = self.flags.numpy()
        for slot, buffer in enumerate(self.buffers):
            if flags[slot] == 0 and (buffer is None or buffer.nbytes() >= nbytes):
                if buffer is None:
                    buffer = self.buffers[slot] = _shared_storage(nbytes)
                flags[slot] = 1
                return slot, buffer
        return None


_pools: dict[int, _Pool] = {}
_pools_lock = threading.Lock()


def _shared_storage(nbytes: int) -> torch.UntypedStorage:
    """Fresh shared memory, as default_collate takes it for a batch in a worker."""
    storage: torch.UntypedStorage = torch.UntypedStorage._new_shared(nbytes)  # type: ignore[no-untyped-call]
    return storage


def _worker_pool() -> _Pool:
    with _pools_lock:
        return _pools.setdefault(os.getpid(), _Pool())


def _released(flags: torch.Tensor, slot: int) -> None:
    flags[slot] = 0


def _received(images: torch.Tensor, flags: torch.Tensor, slot: int) -> torch.Tensor:
    """Unpickled in the training process: the batch, whose buffer goes back to its worker once
    the last tensor on its memory is gone."""
    finalizer = weakref.finalize(images.untyped_storage(), _released, flags, slot)
    finalizer.atexit = False
    return images


def new_batch_tensor(shape: Sequence[int], dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """An uninitialised tensor for a whole batch: in a DataLoader worker, in shared memory (where
    default_collate would have put the batch), preferably a buffer the training process has let
    go of; elsewhere, ordinary memory."""
    if get_worker_info() is None:
        return torch.empty(tuple(shape), dtype=dtype)
    numel = 1
    for side in shape:
        numel *= side
    nbytes = numel * dtype.itemsize
    pool = _worker_pool() if _reuse else None
    taken = pool.take(nbytes) if pool is not None else None
    if pool is None or taken is None:
        return torch.empty(0, dtype=dtype).set_(_shared_storage(nbytes)).view(tuple(shape))
    slot, buffer = taken
    plain = torch.empty(0, dtype=dtype).set_(buffer)[:numel].view(tuple(shape))
    images = plain.as_subclass(_PooledImages)
    images._slot, images._pool = slot, pool
    return images


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
