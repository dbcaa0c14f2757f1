"""``make_loader``: a ``DataLoader`` with defaults that suit packed data on this machine.

:func:`loader_settings` decides, from the machine and the process's place in a job, what
:func:`make_loader` passes to ``torch.utils.data.DataLoader``; it is separate so that tests and
``packer bench --sweep`` can see (and print) the choice without building a loader. Each choice,
in one line (details in :func:`make_loader`'s docstring):

* ``num_workers``: the CPUs this process may use, shared among the local ranks, minus one for
  the main process, at most :data:`MAX_WORKERS`; 0 on a single CPU.
* ``prefetch_factor``: 2, torch's default: ``2 x num_workers`` batches in flight absorb uneven
  images; more only costs memory unless single reads are slow (raise it for network storage).
* ``persistent_workers``: on whenever there are workers: packed readers are cheap to keep open,
  and restarting workers costs seconds per epoch (re-importing torch under ``spawn``).
* ``pin_memory``: only when CUDA is available (page-locked copies help only host-to-GPU
  transfers, and cost a thread and locked memory otherwise).
* sampler: shuffled for training, in order for evaluation; a ``DistributedSampler`` when a
  process group of more than one rank is initialised (``sampler="shard"``: a
  :class:`~packer.read.samplers.ShardAwareSampler` instead); for training on a dataset read by
  ranges from a URL (larger than its node cache), a
  :class:`~packer.read.window_sampler.ShardWindowSampler` whose windows fit the cache.
* ``drop_last``: on for training (no small last batch), off for evaluation (every sample counts).
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, replace
from typing import Any, Final

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler, SequentialSampler

from packer.cpus import available_cpus
from packer.read.datasets import PackedImageDataset
from packer.read.readahead import ReadAheadSampler
from packer.read.samplers import SeededRandomSampler, ShardAwareSampler
from packer.read.window_sampler import ShardWindowSampler, window_bytes_for

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_PREFETCH", "MAX_WORKERS", "SAMPLERS", "LoaderSettings", "SeededRandomSampler",
           "available_cpus", "default_workers", "loader_settings", "make_loader"]

#: The most workers :func:`loader_settings` chooses by itself (an explicit ``num_workers`` may be more).
MAX_WORKERS: Final = 16
#: Batches each worker keeps in flight unless told otherwise (torch's own default).
DEFAULT_PREFETCH: Final = 2
#: Sampler names :func:`make_loader` accepts (``None`` picks one).
SAMPLERS: Final[tuple[str, ...]] = ("random", "sequential", "distributed", "shard", "window")
_RESERVED: Final = frozenset({"shuffle", "batch_sampler", "generator"})


@dataclass(frozen=True)
class LoaderSettings:
    """What :func:`make_loader` passes to ``DataLoader``, and what it was decided from.

    Attributes:
        num_workers, prefetch_factor, persistent_workers, pin_memory, drop_last: The
            ``DataLoader`` arguments (``prefetch_factor`` is ``None`` without workers).
        sampler: ``"random"``, ``"sequential"``, ``"distributed"``, ``"shard"``, ``"window"`` or
            ``"custom"``
            (a sampler object was given).
        shuffle: Whether make_loader's sampler shuffles (``False`` for a ``"custom"`` one: its own
            business).
        cpus: CPUs this process may use (affinity, and the cgroup quota when one is set).
        local_world_size: Ranks on this machine sharing those CPUs (``LOCAL_WORLD_SIZE``).
        world_size, rank: The process group's, or 1 and 0 when not distributed.
    """

    num_workers: int
    prefetch_factor: int | None
    persistent_workers: bool
    pin_memory: bool
    drop_last: bool
    sampler: str
    shuffle: bool
    cpus: int
    local_world_size: int
    world_size: int
    rank: int

    def dataloader_kwargs(self) -> dict[str, Any]:
        """The ``DataLoader`` keyword arguments these settings stand for (sampler excepted)."""
        return {"num_workers": self.num_workers, "prefetch_factor": self.prefetch_factor,
                "persistent_workers": self.persistent_workers, "pin_memory": self.pin_memory,
                "drop_last": self.drop_last}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready settings."""
        return asdict(self)

    def __str__(self) -> str:
        return (f"DataLoader(num_workers={self.num_workers}, prefetch_factor={self.prefetch_factor}, "
                f"persistent_workers={self.persistent_workers}, pin_memory={self.pin_memory}, "
                f"drop_last={self.drop_last}, sampler={self.sampler})")


def _local_world_size() -> int:
    raw = os.environ.get("LOCAL_WORLD_SIZE", "1").strip() or "1"
    try:
        size = int(raw)
    except ValueError:
        size = 0
    if size < 1:
        raise ValueError(f"LOCAL_WORLD_SIZE={raw!r} is not a positive integer: torchrun sets it to the "
                         "number of processes per node; unset it or fix it.")
    return size


def _process_group() -> tuple[int, int] | None:
    """``(world_size, rank)`` of the initialised default process group, else ``None``."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return None


def _check_count(name: str, value: int | None, minimum: int) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < minimum):
        raise ValueError(f"{name} must be an integer of at least {minimum}, not {value!r}")


def _check_flag(name: str, value: bool | None) -> None:
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{name} must be True, False or None (choose for me), not {value!r}")


def default_workers(cpus: int, local_world_size: int = 1) -> int:
    """Workers for one rank: its share of ``cpus`` less one for the main process, 1 to
    :data:`MAX_WORKERS`; 0 when ``cpus`` is 1 (a worker would only time-share that core)."""
    if cpus <= 1:
        return 0
    return max(1, min(MAX_WORKERS, cpus // local_world_size - 1))


def loader_settings(*, train: bool = True, num_workers: int | None = None,
                    prefetch_factor: int | None = None, persistent_workers: bool | None = None,
                    pin_memory: bool | None = None, sampler: str | Sampler[Any] | None = None,
                    distributed: bool | None = None, drop_last: bool | None = None) -> LoaderSettings:
    """Decide :func:`make_loader`'s settings; ``None`` means "choose for me", anything else wins.

    Reads the CPU affinity and cgroup quota, ``LOCAL_WORLD_SIZE``, ``torch.distributed`` and
    ``torch.cuda.is_available()``; see :func:`make_loader` for the reasons.

    Raises:
        ValueError: an argument is out of range or contradicts another (``prefetch_factor`` or
            ``persistent_workers=True`` without workers, an unknown sampler name,
            ``distributed=True`` without an initialised process group, a bad ``LOCAL_WORLD_SIZE``).
    """
    _check_count("num_workers", num_workers, 0)
    _check_count("prefetch_factor", prefetch_factor, 1)
    for name, flag in (("train", train), ("persistent_workers", persistent_workers),
                       ("pin_memory", pin_memory), ("distributed", distributed), ("drop_last", drop_last)):
        _check_flag(name, flag)
    if isinstance(sampler, str) and sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, a Sampler or None, not {sampler!r}")
    if sampler is not None and not isinstance(sampler, str | Sampler):
        raise ValueError(f"sampler must be a name ({', '.join(SAMPLERS)}), a Sampler or None, "
                         f"not {type(sampler).__name__}")
    group = _process_group()
    if distributed and group is None:
        raise ValueError("distributed=True needs an initialised process group: call "
                         "torch.distributed.init_process_group() first (torchrun sets its environment).")
    if sampler == "distributed" and group is None:
        raise ValueError("sampler='distributed' needs an initialised process group; use 'random' or "
                         "'sequential' in a single process.")
    if distributed is False and sampler == "distributed":
        raise ValueError("sampler='distributed' contradicts distributed=False")
    use_group = group is not None and (group[0] > 1 if distributed is None else distributed)
    world_size, rank = group if use_group and group is not None else (1, 0)

    cpus = available_cpus()
    local = _local_world_size()
    workers = default_workers(cpus, local) if num_workers is None else num_workers
    if workers == 0 and prefetch_factor is not None:
        raise ValueError(f"prefetch_factor={prefetch_factor} needs num_workers > 0 (the main process "
                         "does not prefetch); leave it None")
    if workers == 0 and persistent_workers:
        raise ValueError("persistent_workers=True needs num_workers > 0")

    if isinstance(sampler, Sampler):
        name = "custom"
    elif sampler is not None:
        name = sampler
    elif use_group:
        name = "distributed"
    else:
        name = "random" if train else "sequential"
    return LoaderSettings(
        num_workers=workers,
        prefetch_factor=(prefetch_factor or DEFAULT_PREFETCH) if workers else None,
        persistent_workers=(workers > 0) if persistent_workers is None else persistent_workers,
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
        drop_last=train if drop_last is None else drop_last,
        sampler=name,
        shuffle=name == "random" or (train and name in ("distributed", "shard", "window")),
        cpus=cpus,
        local_world_size=local,
        world_size=world_size,
        rank=rank,
    )


def make_loader(ds: Dataset[Any], batch_size: int, *, train: bool = True, num_workers: int | None = None,
                prefetch_factor: int | None = None, persistent_workers: bool | None = None,
                pin_memory: bool | None = None, sampler: str | Sampler[Any] | None = None,
                distributed: bool | None = None, seed: int = 0, drop_last: bool | None = None,
                **dataloader_kwargs: Any) -> DataLoader[Any]:
    """A ``DataLoader`` over ``ds`` with defaults chosen for packed data on this machine.

    Every argument left ``None`` is chosen as below; any value you give wins.
    :func:`loader_settings` returns the same choice without building a loader.

    * ``num_workers``: ``available_cpus() // LOCAL_WORLD_SIZE - 1``, between 1 and
      :data:`MAX_WORKERS` (16); 0 with a single CPU. The CPUs are the affinity mask (what Slurm
      or ``taskset`` gave this process) capped by a cgroup quota (containers); torchrun's ranks
      on one machine share them; the main process keeps one core for the training step, CUDA
      launches and the pin-memory thread (workers beyond the free cores only time-share them).
      Past 16, one GPU is fed already (a worker decodes and crops about 300 images/s) and more
      workers only cost memory (a process each, plus their batches in flight) and start-up time.
    * ``prefetch_factor``: 2: ``2 x num_workers`` batches in flight cover the spread in how long
      a batch takes. A packed batch is one read per shard, so storage latency is rarely the
      bottleneck; raise it (4) on high-latency network storage if ``packer bench --sweep``
      says so.
    * ``persistent_workers``: ``True`` with workers. Packed datasets keep a few open readers per
      worker (cheap), while a restart per epoch costs worker start-up again (seconds under
      ``spawn``/``forkserver``, Python 3.14's default). The sampler stays in the main process, so
      ``set_epoch`` still reaches every epoch; changing ``ds.transform`` later does not reach them.
    * ``pin_memory``: ``torch.cuda.is_available()``. Page-locked batches make
      ``.cuda(non_blocking=True)`` asynchronous; without CUDA they are only a cost.
    * sampler: training shuffles (:class:`SeededRandomSampler`, seeded with ``seed``),
      evaluation keeps dataset order. When ``torch.distributed`` is initialised with more than
      one rank (or ``distributed=True``), a ``DistributedSampler(shuffle=train, seed=seed)``;
      ``sampler="shard"`` gives a :class:`~packer.read.samplers.ShardAwareSampler` (block reads for
      slow random access; ``ds`` must be a packed dataset), distributed or not. Training on a
      URL dataset read by ranges (larger than its cache) gets a cache-sized
      :class:`~packer.read.window_sampler.ShardWindowSampler` (``sampler="window"``). **Call**
      ``loader.sampler.set_epoch(epoch)`` **before each training epoch**: the distributed
      samplers otherwise repeat one order every epoch, and with it every sampler's order
      depends on ``(seed, epoch)`` alone, so a resumed job reads what it would have.
      Distributed evaluation pads each rank to the same length with repeated samples, as
      ``DistributedSampler`` does. A ``Sampler`` object is used as given.
    * ``drop_last``: ``train``. A small last batch skews the last step and breaks BatchNorm at
      size 1; in evaluation every sample counts.
    * ``multiprocessing_context`` is left to torch (``fork`` on Linux up to 3.13) and no
      ``worker_init_fn`` is needed: packer datasets reopen their files in each worker, under any
      start method; torch seeds each worker's RNGs apart.

    Args:
        ds: Any map-style dataset (a packer dataset for ``sampler="shard"``).
        batch_size: Samples per batch (per process under DDP).
        train: Training (shuffle, drop the last partial batch) or evaluation.
        seed: Seeds the shuffle (the same on every rank).
        **dataloader_kwargs: Passed through (``collate_fn``, ``timeout``,
            ``multiprocessing_context``, ``worker_init_fn``, ``in_order``...).

    Raises:
        ValueError: as :func:`loader_settings`; also a bad ``batch_size`` or ``seed``, or
            ``shuffle``/``batch_sampler``/``generator`` in ``dataloader_kwargs`` (use ``train``,
            ``sampler`` and ``seed``; for a batch sampler build the ``DataLoader`` yourself).
        TypeError: ``sampler="shard"`` with a dataset that is not a packer dataset.
    """
    if batch_size is None:
        raise ValueError("batch_size must be an integer of at least 1, not None (make_loader batches)")
    _check_count("batch_size", batch_size, 1)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int, not {seed!r}")
    reserved = sorted(_RESERVED & dataloader_kwargs.keys())
    if reserved:
        raise ValueError(f"make_loader does not take {', '.join(reserved)}: use train= and sampler= "
                         "(and seed=), or build the DataLoader yourself for a batch sampler")
    settings = loader_settings(train=train, num_workers=num_workers, prefetch_factor=prefetch_factor,
                               persistent_workers=persistent_workers, pin_memory=pin_memory,
                               sampler=sampler, distributed=distributed, drop_last=drop_last)
    chosen = _sampler(ds, _for_the_cache(ds, settings, sampler), sampler, seed)
    if isinstance(ds, PackedImageDataset) and ds.access_mode != "local":
        chosen = _read_ahead(ds, chosen, settings, batch_size)
    return DataLoader(ds, batch_size=batch_size, sampler=chosen, **settings.dataloader_kwargs(),
                      **dataloader_kwargs)


def _read_ahead(ds: PackedImageDataset, chosen: Sampler[Any] | None, settings: LoaderSettings,
                batch_size: int) -> ReadAheadSampler:
    """The sampler wrapped to fetch ahead of the workers, in its order, for a dataset behind a URL:
    a few batches per worker in flight, or one window of samples at a time under the window
    sampler (its window fits the cache, so a window's ranges go out together and coalesce)."""
    in_flight = max(1, settings.num_workers) * (settings.prefetch_factor or 2)
    order = chosen if chosen is not None else SequentialSampler(ds)
    lookahead, chunk = batch_size * max(8, 2 * in_flight), None
    if isinstance(chosen, ShardWindowSampler) and chosen.window_bytes:
        lookahead = chunk = max(1, chosen.window_bytes * len(ds) // max(1, ds.manifest.num_bytes))
    return ReadAheadSampler(order, ds, lookahead=lookahead, chunk=chunk)


def _for_the_cache(ds: Dataset[Any], settings: LoaderSettings,
                   given: str | Sampler[Any] | None) -> LoaderSettings:
    """``settings`` with the window sampler for training on a packer dataset read by ranges from
    a URL (it did not fit its node cache: a uniform shuffle would refetch all epoch long)."""
    if (given is None and settings.shuffle and isinstance(ds, PackedImageDataset)
            and ds.access_mode == "ranged"):
        room, total = ds.cache_room or 0, max(1, ds.manifest.num_bytes)
        log.warning("make_loader: %s (%.2f GB) does not fit its node cache (%.2f GB): training reads "
                    "it in windows of shards that fit (ShardWindowSampler, windows of about %.1f%% of "
                    "the dataset). A batch then draws from the shards of one window: in ImageFolder "
                    "order, a few classes, which can slow or stall training (docs/scaling-out.md, "
                    "'What it costs'). Give the cache more room (cache_limit=, cache_dir=) or pass "
                    "sampler='random' for a uniform shuffle at the cost of refetching.",
                    ds.root, total / 1e9, room / 1e9, 100 * window_bytes_for(room) / total)
        return replace(settings, sampler="window")
    return settings


def _sampler(ds: Dataset[Any], settings: LoaderSettings, given: str | Sampler[Any] | None,
             seed: int) -> Sampler[Any] | None:
    """The sampler object for ``settings`` (``None``: the DataLoader's sequential one)."""
    if isinstance(given, Sampler):
        return given
    if settings.sampler == "shard":
        if not isinstance(ds, PackedImageDataset):
            raise TypeError(f"sampler='shard' needs a packer dataset, not {type(ds).__name__}; pass "
                            "packer.ShardAwareSampler(shard_sizes, ...) as sampler= for other datasets")
        return ShardAwareSampler(ds, settings.world_size, settings.rank, shuffle=settings.shuffle, seed=seed)
    if settings.sampler == "window":
        room = ds.cache_room if isinstance(ds, PackedImageDataset) else None
        if room is None:
            raise TypeError("sampler='window' needs a packer dataset read from a URL (its windows fit "
                            "its node cache); pass packer.ShardWindowSampler(ds, window_bytes=...) as "
                            "sampler= to choose the windows yourself")
        return ShardWindowSampler(ds, settings.world_size, settings.rank, shuffle=settings.shuffle, seed=seed,
                                  window_bytes=window_bytes_for(room))
    if settings.sampler == "distributed":
        return DistributedSampler(ds, num_replicas=settings.world_size, rank=settings.rank,
                                  shuffle=settings.shuffle, seed=seed)
    if settings.sampler == "random":
        return SeededRandomSampler(ds, seed)  # type: ignore[arg-type]  # map-style datasets are Sized
    return None
