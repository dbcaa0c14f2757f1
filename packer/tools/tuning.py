"""``packer bench --sweep``: which DataLoader settings load a packed dataset fastest here."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

from packer.read.loader import DEFAULT_PREFETCH, available_cpus, loader_settings
from packer.tools import bench as measure
from packer.tools.bench import BenchReport

__all__ = ["sweep"]


def sweep(dst: str | os.PathLike[str], *, pipeline: str = "train", batch_size: int = 64,
          limit: int | None = None, repeats: int = 2) -> Iterator[tuple[dict[str, Any], BenchReport]]:
    """Try ``num_workers`` x ``prefetch_factor`` x ``persistent_workers`` on the packed dataset.

    The grid is 1, half and all of :func:`~packer.read.loader.available_cpus` workers, prefetch 2
    and 4, persistent on and off, plus :func:`packer.make_loader`'s own choice for training
    (:func:`~packer.read.loader.loader_settings`) when the grid lacks it; that setting comes first and
    has ``"make_loader": True`` (every other ``False``). ``prefetch_factor`` is ``None`` without
    workers. Yields each setting with its report; the caller ranks them
    (:func:`packer.cli.formatting.format_sweep`). With persistent workers off, each timed epoch includes
    starting the workers, as training with ``persistent_workers=False`` pays it every epoch.
    The main process only receives the batches (``fast``: and normalises them); a training
    step needs a core too, which is why ``make_loader`` leaves it one.
    """
    default = loader_settings(train=True, distributed=False)
    mine = (default.num_workers, default.prefetch_factor, default.persistent_workers)
    cpus = available_cpus()
    grid: list[tuple[int, int | None, bool]] = list(itertools.product(
        sorted({1, max(1, cpus // 2), cpus}), (2, 4), (True, False)))
    for workers, prefetch, persistent in [mine, *(s for s in grid if s != mine)]:
        setting = {"num_workers": workers, "prefetch_factor": prefetch, "persistent_workers": persistent,
                   "make_loader": (workers, prefetch, persistent) == mine}
        yield setting, measure.bench(dst, pipeline=pipeline, workers=workers, batch_size=batch_size,
                                     repeats=repeats, prefetch_factor=prefetch or DEFAULT_PREFETCH,
                                     persistent_workers=persistent, limit=limit)

