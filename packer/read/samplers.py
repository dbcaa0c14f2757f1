"""A distributed, resumable sampler that keeps reads sequential: :class:`ShardAwareSampler`.

A global random order (``RandomSampler``, ``DistributedSampler``) reads every sample from a
random place of the shard files. That is free on a warm page cache or a local SSD, and slow
where random reads are slow: spinning disks, NFS, Lustre, a cold cache. This sampler reads in
*blocks*, runs of consecutive samples, and still mixes the data well.

The order of an epoch, with a ``torch.Generator`` seeded by ``seed + epoch``:

1. **Blocks.** Each shard is cut into runs of ``block_size`` consecutive sample indices (the
   last block of a shard may be shorter); a block never crosses a shard boundary, so it is one
   sequential read range of one file.
2. **Block order.** All blocks of the dataset are permuted together (one ``torch.randperm``).
   This also randomises the shard order. Permuting shards and then interleaving the blocks of
   a few neighbouring shards would read fewer files at a time, but ImageFolder order is class
   order: a shard (and so a block) holds one or a few classes, and batches would see only the
   classes of those few shards. A global block permutation puts blocks from anywhere in the
   dataset next to each other.
3. **Windows.** The block sequence is cut into windows of ``window`` consecutive blocks, and
   the samples of each window are shuffled together (one ``torch.randperm`` per window). A
   batch then draws from up to ``window`` places (and classes) of the dataset, while the reads
   of a window stay in ``window`` sequential runs (and a DataLoader batch is read in file
   order, see :meth:`packer.format.shardset.ShardSet.read_many`).
4. **Ranks.** The epoch order is padded to a multiple of ``num_replicas`` by repeating its
   start (or its tail is dropped with ``drop_last=True``), as ``DistributedSampler`` does, and
   each rank takes a *contiguous* slice of it, so every rank yields exactly ``len(sampler)``
   indices (no rank waits at a collective for another) and keeps the read locality
   (``rank::num_replicas`` interleaving would split every run across all ranks).

The knobs trade locality against mixing. ``block_size * window`` samples are shuffled
together: a larger ``block_size`` gives longer sequential reads, a larger ``window`` gives
more classes per batch and more concurrent read positions. With ``window=1`` each block is
read in file order and a batch holds ``batch_size / block_size`` whole blocks: one class per
batch once ``block_size >= batch_size``, so keep ``window`` well above 1 for training.
``block_size=1`` is a global shuffle (no locality left). The defaults (64 x 16) shuffle 1024
samples at a time, so a batch of 64 comes from about 16 blocks. The order is not a uniform
permutation: two samples of one block are at most ``block_size * window`` positions apart.
For evaluation, ``shuffle=False`` keeps dataset order (still in contiguous, equal rank slices).

The same seed, epoch, shard layout, ``num_replicas`` and ``rank`` give the same order on
every machine (same torch version). Building an epoch's order costs O(dataset size) time and
memory in the main process, as ``DistributedSampler``'s does.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Iterator, Sequence, Sized
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import RandomSampler, Sampler

from packer.read.datasets import PackedImageDataset

__all__ = ["SeededRandomSampler", "ShardAwareSampler"]

#: Keys of :meth:`ShardAwareSampler.state_dict` a loaded state sets; all the others must match
#: (the order depends on them).
_FREE = ("epoch", "seed", "yielded")


class ShardAwareSampler(Sampler[int]):
    """Epoch-seeded sampler that reads shards in shuffled blocks and splits them across ranks.

    Use it like ``DistributedSampler``: pass it as ``DataLoader(sampler=...)`` and call
    :meth:`set_epoch` before each epoch. It also works on one process (world size 1).

    Args:
        dataset: A :class:`~packer.read.datasets.PackedImageDataset` (its manifest gives the shard
            ranges), or the sizes of consecutive runs of a dataset that reads best in order,
            e.g. ``[len(d) for d in concat.datasets]`` for a ``ConcatDataset``.
        num_replicas: World size. Default: ``torch.distributed``'s when it is initialised,
            else 1. Captured here, in the main process (DataLoader workers have no process group).
        rank: This process's rank. Default: ``torch.distributed``'s when initialised, else 0.
        shuffle: ``False`` keeps dataset order (evaluation); blocks and windows are then unused.
        seed: Base seed; epoch ``e`` uses ``seed + e``. Must be the same on every rank.
        drop_last: Drop the tail of the epoch order to make it divisible by ``num_replicas``
            instead of padding it with repeated samples.
        block_size: Consecutive samples read as one run (never across a shard boundary).
        window: Blocks whose samples are shuffled together.

    Raises:
        TypeError: ``dataset`` is neither a packed dataset nor a sequence of sizes.
        ValueError: a size, ``num_replicas``, ``rank``, ``block_size`` or ``window`` is out of range.
    """

    def __init__(
        self,
        dataset: PackedImageDataset | Sequence[int],
        num_replicas: int | None = None,
        rank: int | None = None,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        block_size: int = 64,
        window: int = 16,
    ) -> None:
        self.shard_sizes = _shard_sizes(dataset)
        self.num_replicas = _world_size() if num_replicas is None else int(num_replicas)
        if self.num_replicas < 1:
            raise ValueError(f"num_replicas must be at least 1, not {self.num_replicas}.")
        self.rank = _rank() if rank is None else int(rank)
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"rank {self.rank} is out of range for num_replicas={self.num_replicas} "
                             f"(valid: 0..{self.num_replicas - 1}).")
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, not {block_size}.")
        if window < 1:
            raise ValueError(f"window must be at least 1, not {window}.")
        self.shuffle = shuffle
        self.seed = int(seed)
        self.drop_last = drop_last
        self.block_size = int(block_size)
        self.window = int(window)
        self.dataset_size = sum(self.shard_sizes)
        if drop_last:
            self.total_size = self.dataset_size // self.num_replicas * self.num_replicas
        else:
            self.total_size = math.ceil(self.dataset_size / self.num_replicas) * self.num_replicas
        self.num_samples = self.total_size // self.num_replicas
        self.epoch = 0
        self._yielded = 0  # position in this rank's order of the epoch, of the latest iterator
        self._resume = False  # the next __iter__ starts at _yielded (set by load_state_dict)

    def __len__(self) -> int:
        """Indices this rank yields per epoch (the same on every rank)."""
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order the next iterator yields (a pending resume is kept
        only if it is for this epoch)."""
        if epoch != self.epoch:
            self._yielded = 0
            self._resume = False
        self.epoch = int(epoch)

    def epoch_order(self) -> torch.Tensor:
        """The whole epoch's order over all ranks, padded or cut to ``num_replicas`` equal slices."""
        if not self.shuffle:
            order = torch.arange(self.dataset_size, dtype=torch.int64)
        else:
            order = self._shuffled_order()
        if self.total_size <= self.dataset_size:
            return order[: self.total_size]
        repeats = math.ceil((self.total_size - self.dataset_size) / self.dataset_size)
        return torch.cat([order, order.repeat(repeats)])[: self.total_size]

    def _shuffled_order(self) -> torch.Tensor:
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        starts, lengths = self._blocks()
        permutation = torch.randperm(len(starts), generator=generator)
        starts, lengths = starts[permutation], lengths[permutation]
        # Sample indices of the permuted blocks, end to end: start of its block + offset in it.
        ends = torch.cumsum(lengths, 0)
        offsets = torch.arange(self.dataset_size, dtype=torch.int64) - torch.repeat_interleave(
            ends - lengths, lengths)
        order = torch.repeat_interleave(starts, lengths) + offsets
        # Shuffle the samples of each window of `window` blocks together.
        bounds = [0, *ends[self.window - 1:: self.window].tolist()]
        if bounds[-1] != self.dataset_size:
            bounds.append(self.dataset_size)
        pieces = [order[a:b][torch.randperm(b - a, generator=generator)]
                  for a, b in zip(bounds, bounds[1:], strict=False)]
        return torch.cat(pieces) if pieces else order

    def _blocks(self) -> tuple[torch.Tensor, torch.Tensor]:
        """First sample index and length of every block, in dataset order."""
        starts, lengths = [torch.zeros(0, dtype=torch.int64)], [torch.zeros(0, dtype=torch.int64)]
        first = 0
        for size in self.shard_sizes:
            begin = torch.arange(first, first + size, self.block_size, dtype=torch.int64)
            starts.append(begin)
            lengths.append(torch.clamp(first + size - begin, max=self.block_size))
            first += size
        return torch.cat(starts), torch.cat(lengths)

    def __iter__(self) -> Iterator[int]:
        start = self._yielded if self._resume else 0
        self._resume = False
        mine = self.epoch_order()[self.rank * self.num_samples: (self.rank + 1) * self.num_samples]
        self._yielded = start
        return self._count(mine[start:].tolist())

    def _count(self, indices: list[int]) -> Iterator[int]:
        for index in indices:
            self._yielded += 1
            yield index

    def state_dict(self, *, consumed: int | None = None) -> dict[str, int]:
        """Where this rank is in the epoch, as a plain dict of ints (for a checkpoint).

        Args:
            consumed: Samples of this epoch the training loop has received, counted from the
                epoch's start. Give it with a plain ``DataLoader``, whose workers prefetch (the
                sampler runs ahead of the loop). torchdata's ``StatefulDataLoader`` needs none:
                it snapshots the sampler when it hands out each batch's indices.
        """
        yielded = self._yielded if consumed is None else int(consumed)
        if not 0 <= yielded <= self.num_samples:
            raise ValueError(f"consumed={yielded} is out of range: this rank yields "
                             f"{self.num_samples} samples per epoch.")
        return {"epoch": self.epoch, "seed": self.seed, "yielded": yielded,
                "num_replicas": self.num_replicas, "num_samples": self.dataset_size,
                "shard_layout": _layout(self.shard_sizes), **self._order_params(),
                "shuffle": int(self.shuffle), "drop_last": int(self.drop_last)}

    def _order_params(self) -> dict[str, int]:
        """The settings the shuffled order depends on, beyond seed, epoch and layout."""
        return {"block_size": self.block_size, "window": self.window}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next iterator yields the rest of the saved epoch, after ``yielded`` indices.

        Adopts the saved ``epoch`` and ``seed``; a later :meth:`set_epoch` with the same epoch
        keeps the resume, another epoch starts that epoch from its beginning.

        Raises:
            ValueError: a key is missing or not an int, or the state is for another world size,
                dataset or sampler setting (the resumed order would not be the saved one).
        """
        mine = self.state_dict(consumed=0)
        kind = type(self).__name__
        missing = [key for key in mine if key not in state]
        if missing:
            raise ValueError(f"Not a {kind} state: missing {', '.join(missing)}.")
        bad = [key for key in mine if not isinstance(state[key], int)]
        if bad:
            raise ValueError(f"{kind} state has non-integer {', '.join(bad)}.")
        for key in (key for key in mine if key not in _FREE):
            if state[key] != mine[key]:
                raise ValueError(f"Cannot resume: the state has {key}={state[key]}, this sampler has "
                                 f"{key}={mine[key]}; resume with the same world size, dataset and "
                                 "sampler settings, or start the epoch again.")
        if not 0 <= state["yielded"] <= self.num_samples:
            raise ValueError(f"Cannot resume: yielded={state['yielded']} is out of range for "
                             f"{self.num_samples} samples per rank.")
        self.epoch = state["epoch"]
        self.seed = state["seed"]
        self._yielded = state["yielded"]
        self._resume = True

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(samples={self.dataset_size}, shards={len(self.shard_sizes)}, "
                f"num_replicas={self.num_replicas}, rank={self.rank}, block_size={self.block_size}, "
                f"window={self.window}, shuffle={self.shuffle}, seed={self.seed}, epoch={self.epoch})")


def _shard_sizes(dataset: PackedImageDataset | Sequence[int]) -> tuple[int, ...]:
    if isinstance(dataset, PackedImageDataset):
        return tuple(shard.num_samples for shard in dataset.manifest.shards)
    if isinstance(dataset, Sequence) and not isinstance(dataset, str | bytes):
        sizes = tuple(dataset)
        for position, size in enumerate(sizes):
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise ValueError(f"shard size {position} is {size!r}; give non-negative ints.")
        return sizes
    raise TypeError(f"ShardAwareSampler needs a packer dataset or a sequence of shard sizes, not "
                    f"{type(dataset).__name__}; for other datasets use DistributedSampler.")


def _layout(sizes: Sequence[int]) -> int:
    """A fingerprint of the shard sizes: a re-sharded dataset of the same length differs."""
    return zlib.crc32(struct.pack(f"<{len(sizes)}q", *sizes))


def _world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class SeededRandomSampler(RandomSampler):
    """``RandomSampler`` with ``set_epoch``, so one training loop fits every sampler make_loader builds.

    Without :meth:`set_epoch` each epoch continues the generator seeded with ``seed`` (a new
    order every epoch); :meth:`set_epoch` makes epoch ``e``'s order depend on ``seed + e`` alone,
    as ``DistributedSampler``'s does, so a job resumed at epoch ``e`` reads what it would have.
    """

    def __init__(self, data_source: Sized, seed: int = 0) -> None:
        super().__init__(data_source, generator=torch.Generator().manual_seed(seed))
        self.seed = seed

    def set_epoch(self, epoch: int) -> None:
        """Draw epoch ``epoch``'s order from ``seed + epoch``."""
        if self.generator is not None:
            self.generator.manual_seed(self.seed + epoch)
