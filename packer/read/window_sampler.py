"""A shuffle that fits a small node cache: :class:`ShardWindowSampler`.

A dataset read from a URL through a cache smaller than itself reads each record by range. A
uniform shuffle (or :class:`~packer.read.samplers.ShardAwareSampler`'s global block permutation)
then asks for records from anywhere in the dataset all epoch long: the cache keeps evicting what
it will need again, and every record costs its own request. This sampler reads the dataset a
*window of shards* at a time, as MosaicML Streaming and LitData do:

1. **Shard order.** The shards are permuted (``torch.Generator`` seeded with ``seed + epoch``).
   A shard of more stored bytes than a window is first cut into runs of consecutive samples
   (records lie in a shard in about sample order) that fit one, and the runs are permuted with the
   shards: a node whose cache is smaller than one shard still reads it a window at a time.
2. **Windows.** The permuted shards (and runs) are cut, in that order, into windows of at most
   ``window_bytes`` stored bytes (at least one each), or of ``window_shards`` shards.
3. **Samples.** The samples of each window are shuffled together (uniformly within it); windows
   follow one another, so the reads of an epoch walk the dataset once, window by window.
4. **Ranks.** As :class:`~packer.read.samplers.ShardAwareSampler`'s: contiguous, equal slices of
   the epoch order (padded by repeating its start, or cut with ``drop_last``), so each rank reads
   its own windows; resumable mid-epoch with :meth:`state_dict` / :meth:`load_state_dict`.

What it costs in randomness: a batch draws from the classes of one window's shards (or two,
where windows meet), not from the whole dataset. ImageFolder order is class order, so a window
of k shards holds about k (or a few more) classes: keep windows as large as the cache allows.
``make_loader`` chooses it for training on a dataset read by ranges (one that does not fit its
cache), with windows of a quarter of the cache's bound per process reading through it (the
window being read and the next one, read ahead, both fit, with room to spare), and a uniform
shuffle when the dataset fits.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from packer.read.datasets import PackedImageDataset
from packer.read.samplers import ShardAwareSampler

__all__ = ["ShardWindowSampler", "window_bytes_for"]


def window_bytes_for(cache_bytes: int, readers: int | None = None) -> int:
    """The window for a cache of ``cache_bytes`` shared by ``readers`` processes (default: the
    local ranks torchrun reports in ``LOCAL_WORLD_SIZE``, else 1): a quarter of each one's share."""
    count = readers if readers is not None else int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    return max(1, cache_bytes // (4 * max(1, count)))


class ShardWindowSampler(ShardAwareSampler):
    """Epoch-seeded sampler that shuffles shards, then samples within windows of shards (see the
    module docstring). Use it like ``DistributedSampler``; call :meth:`set_epoch` before each epoch.

    Args:
        dataset: A packer dataset (its manifest gives each shard's samples and bytes), or the
            sample counts of consecutive shards (then give ``shard_bytes`` or ``window_shards``).
        num_replicas: World size (default: ``torch.distributed``'s, else 1).
        rank: This process's rank (default: ``torch.distributed``'s, else 0).
        shuffle: ``False`` keeps dataset order (evaluation).
        seed: Base seed; epoch ``e`` uses ``seed + e``. The same on every rank.
        drop_last: Cut the epoch order to a multiple of ``num_replicas`` instead of padding it.
        window_bytes: The most stored bytes of one window (a window holds at least one shard).
        window_shards: Instead: shards per window.
        shard_bytes: With a sequence of counts: each shard's stored bytes.

    Raises:
        ValueError: neither or both of ``window_bytes`` and ``window_shards``, one below 1, or
            ``shard_bytes`` missing or of another length than the shards.
    """

    def __init__(self, dataset: PackedImageDataset | Sequence[int], num_replicas: int | None = None,
                 rank: int | None = None, *, shuffle: bool = True, seed: int = 0, drop_last: bool = False,
                 window_bytes: int | None = None, window_shards: int | None = None,
                 shard_bytes: Sequence[int] | None = None) -> None:
        super().__init__(dataset, num_replicas, rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        if (window_bytes is None) == (window_shards is None):
            raise ValueError("give one of window_bytes (stored bytes per window) and window_shards")
        for name, value in (("window_bytes", window_bytes), ("window_shards", window_shards)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be a positive int, not {value!r}")
        if isinstance(dataset, PackedImageDataset):
            shard_bytes = [shard.num_bytes for shard in dataset.manifest.shards]
        if window_bytes is not None and (shard_bytes is None or len(shard_bytes) != len(self.shard_sizes)):
            raise ValueError(f"window_bytes needs each shard's bytes: give shard_bytes= "
                             f"({len(self.shard_sizes)} sizes) with shard counts, or window_shards=")
        self.window_bytes, self.window_shards = window_bytes, window_shards
        self.shard_bytes = tuple(int(b) for b in shard_bytes) if shard_bytes is not None else None
        self.pieces = self._cut_pieces()

    def _cut_pieces(self) -> tuple[tuple[int, int, int], ...]:
        """The units the shuffle permutes, ``(first sample, stop, stored bytes)``: each shard, or
        with ``window_bytes`` a shard of more bytes cut into as many equal runs as it takes."""
        out: list[tuple[int, int, int]] = []
        first = 0
        for shard, count in enumerate(self.shard_sizes):
            size = self.shard_bytes[shard] if self.shard_bytes is not None else 0
            per_run = max(1, self.window_bytes * count // size) if self.window_bytes and size else count
            parts = max(1, -(-count // max(1, per_run)))
            for part in range(parts):
                start, stop = first + count * part // parts, first + count * (part + 1) // parts
                out.append((start, stop, size * (stop - start) // max(1, count)))
            first += count
        return tuple(out)

    def _order_params(self) -> dict[str, int]:
        return {"window_bytes": self.window_bytes or 0, "window_shards": self.window_shards or 0}

    def windows(self, piece_order: Sequence[int]) -> list[list[int]]:
        """``piece_order`` (numbers of :attr:`pieces`: the shards, where none is cut) cut into
        windows, in order, each a list of piece numbers."""
        out: list[list[int]] = []
        held = 0
        for piece in piece_order:
            size = self.pieces[piece][2]
            full = (len(out[-1]) >= self.window_shards if self.window_shards is not None
                    else held + size > (self.window_bytes or 0)) if out else True
            if full:
                out.append([])
                held = 0
            out[-1].append(piece)
            held += size
        return out

    def _shuffled_order(self) -> torch.Tensor:
        generator = torch.Generator()
        generator.manual_seed(self.seed + self.epoch)
        piece_order = torch.randperm(len(self.pieces), generator=generator).tolist()
        runs = [torch.zeros(0, dtype=torch.int64)]
        for window in self.windows(piece_order):
            indices = torch.cat([torch.arange(*self.pieces[p][:2], dtype=torch.int64) for p in window])
            runs.append(indices[torch.randperm(len(indices), generator=generator)])
        return torch.cat(runs)

    def __repr__(self) -> str:
        window = (f"window_shards={self.window_shards}" if self.window_shards is not None
                  else f"window_bytes={self.window_bytes}")
        return (f"{type(self).__name__}(samples={self.dataset_size}, shards={len(self.shard_sizes)}, "
                f"num_replicas={self.num_replicas}, rank={self.rank}, {window}, shuffle={self.shuffle}, "
                f"seed={self.seed}, epoch={self.epoch})")
