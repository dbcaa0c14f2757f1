"""Read-ahead for datasets behind a URL: fetch into the node cache, in the order the sampler
will ask, a little ahead of what the DataLoader has handed to its workers.

Workers see one batch at a time; the sampler, iterated in the training process, knows the whole
epoch. :class:`ReadAheadSampler` wraps any sampler: as the DataLoader draws indices from it, a
thread in the training process fetches the shards or record blocks of the next ``lookahead``
indices into the node cache that every worker reads through, so a worker's batch finds its
bytes already there. It stays ``lookahead`` indices ahead, never more, and it stays off when the
cache's bound cannot hold four times that window: fetched too early into a small cache, bytes
would be evicted before a worker reads them, and fetched twice (measured: 6x the dataset's bytes
per epoch with a cache a tenth of its size). A local dataset needs none of this: the sampler is
then passed through untouched.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from torch.utils.data import Sampler

from packer.read.datasets import PackedImageDataset

__all__ = ["ReadAheadSampler"]

log = logging.getLogger(__name__)

_CHUNK = 64


class ReadAheadSampler(Sampler[int]):
    """``sampler``'s indices, with the bytes of the next ``lookahead`` fetched in the background.

    Args:
        sampler: Any sampler (or iterable of indices): ``RandomSampler``, ``DistributedSampler``,
            :class:`~packer.read.samplers.ShardAwareSampler`. ``set_epoch``, ``state_dict`` and
            other attributes are passed through to it.
        dataset: The packed dataset the indices address.
        lookahead: How many indices ahead of the DataLoader to fetch (default: 8 batches of 64).
        chunk: Indices fetched together (default 64); fewer, larger GETs the more they are.
            ``make_loader`` reads a :class:`~packer.read.window_sampler.ShardWindowSampler`'s
            dataset one window ahead, a window per chunk: a window's records are contiguous
            runs of its shards, so they come in about one GET per shard run.
    """

    def __init__(self, sampler: Iterable[int], dataset: PackedImageDataset, *, lookahead: int = 512,
                 chunk: int | None = None) -> None:
        self.sampler = sampler
        self.dataset = dataset
        self.chunk = _CHUNK if chunk is None else max(1, int(chunk))
        self.lookahead = max(int(lookahead), self.chunk)

    def __len__(self) -> int:
        return len(self.sampler)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        if name in ("sampler", "dataset", "lookahead", "chunk"):
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def active(self) -> bool:
        """Whether this reads ahead: a dataset behind a URL whose cache holds 4 windows."""
        if self.dataset.access_mode == "local":
            return False
        limit = getattr(getattr(self.dataset._shards.access, "cache", None), "limit", None)
        if limit is None:
            return True
        per_sample = self.dataset.manifest.num_bytes / max(1, len(self.dataset))
        return bool(limit >= 4 * self.lookahead * per_sample)

    def __iter__(self) -> Iterator[int]:
        if not self.active():
            yield from self.sampler
            return
        order = list(self.sampler)
        position = _Position()
        worker = threading.Thread(target=self._fetch_ahead, args=(order, position), daemon=True,
                                  name="packer-readahead")
        worker.start()
        try:
            for count, index in enumerate(order):
                position.advance(count)
                yield index
        finally:
            position.stop()

    def _fetch_ahead(self, order: list[int], position: _Position) -> None:
        shards = self.dataset._shards
        done = 0
        while done < len(order) and position.wait_until_behind(done - self.lookahead):
            chunk = order[done:done + self.chunk]
            try:
                shards.prefetch(chunk)
            except Exception as err:  # noqa: BLE001 - a worker's own read retries and reports it
                log.debug("read-ahead of %d indices failed: %s", len(chunk), err)
            done += len(chunk)


class _Position:
    """How far the DataLoader has drawn, shared with the read-ahead thread."""

    def __init__(self) -> None:
        self._drawn = 0
        self._stopped = False
        self._changed = threading.Condition()

    def advance(self, drawn: int) -> None:
        with self._changed:
            self._drawn = drawn
            self._changed.notify_all()

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify_all()

    def wait_until_behind(self, fetched_minus_lookahead: int) -> bool:
        """Block while the fetcher is ``lookahead`` or more ahead; False once iteration ended."""
        with self._changed:
            while not self._stopped and fetched_minus_lookahead > self._drawn:
                self._changed.wait(0.5)
            return not self._stopped
