"""Write planned shards on an engine, with one progress bar: the middle of every conversion."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace

from packer.conversion.engines.base import Engine, Progress
from packer.conversion.engines.local import LocalEngine
from packer.conversion.job import Job
from packer.conversion.receipts import ShardResult
from packer.conversion.scheduling import Collector, make_tasks
from packer.conversion.tasks import ShardTask
from packer.cpus import available_cpus
from packer.progressbar import ProgressBar

__all__ = ["choose_engine", "write_shards"]


class _Bar:
    """One progress bar for the run: it ends at the number of samples packed."""

    def __init__(self, total: int, *, enabled: bool, desc: str) -> None:
        self._bar = ProgressBar(total=total, unit="img", disable=None if enabled else True,
                                    desc=desc, dynamic_ncols=True)

    def kept(self, result: ShardResult) -> None:
        self._bar.total -= len(result.skipped)
        self._bar.update(len(result.relpaths))

    def progress(self, progress: Progress) -> None:
        sign = -1 if progress.retracted else 1  # a task is redone: take back what it had counted
        self._bar.total -= sign * progress.skipped
        self._bar.update(sign * progress.packed)

    def close(self) -> None:
        self._bar.close()


def choose_engine(engine: Engine | None, workers: int | None) -> Engine:
    """``engine``, or the local pool of ``workers`` processes (default: the usable CPUs).

    Raises:
        ValueError: ``workers`` below 1, or both given.
        TypeError: ``engine`` is a name, not an engine (open one with ``open_engine(name)``).
    """
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    if isinstance(engine, str):
        raise TypeError(f"engine= takes an Engine, not the name {engine!r}: open one with "
                        f"open_engine({engine!r}) (with open_engine(...) as engine: ...)")
    if engine is not None:
        if workers is not None:
            raise ValueError("give workers or an engine, not both (an engine has its own workers)")
        return engine
    return LocalEngine(workers or available_cpus())


def write_shards(job: Job, todo: list[ShardTask], kept: dict[int, ShardResult], staging: str,
                 engine: Engine, *, progress: bool,
                 on_shard: Callable[[ShardResult], None] | None = None) -> dict[int, ShardResult]:
    """Write the ``todo`` shards on ``engine`` through ``staging``; all finished shards by number.
    ``on_shard`` is called in this process with each shard as it is finished (renamed into DST,
    its receipt written).

    On any failure (Ctrl-C included) the workers are stopped; the slot that gave ``staging``
    (:mod:`packer.conversion.destination.lifecycle`) deletes what they left half-written there, and shards
    already renamed into DST stay for ``resume=True``.
    """
    shard_tasks = [replace(task, staging=staging) for task in todo]
    tasks = make_tasks(shard_tasks, engine.parallelism)
    collect = Collector(tasks, on_shard)
    total = sum(len(task.items) for task in shard_tasks) + sum(
        len(r.relpaths) + len(r.skipped) for r in kept.values())
    bar = _Bar(total, enabled=progress, desc=f"packing {os.path.basename(job.src) or job.src}")
    try:
        for result in kept.values():
            bar.kept(result)
        engine.run(tasks, on_progress=bar.progress, on_result=collect)
    except BaseException:
        collect.abort()  # the caller's slot then deletes what workers left in staging
        raise
    finally:
        bar.close()
    return {**kept, **collect.shards}
