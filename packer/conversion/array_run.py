"""Run one array task of a conversion: its share of the shards, and no manifest.

Every task runs the same command with its own id; they may run at the same time, on different
machines, into one DST on shared storage (see :mod:`packer.conversion.arrayjob` for where the
id comes from, and :func:`packer.conversion.merging.merge` for the step that follows). Each task
holds a shared lease on DST (:func:`~packer.conversion.destination.lifecycle.task_slot`): tasks run together,
but not alongside a ``convert``, ``merge`` or ``update`` of it, nor twice with one id at once.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from packer.conversion.destination.lifecycle import task_slot
from packer.conversion.engines.base import Engine
from packer.conversion.execution import choose_engine, write_shards
from packer.conversion.job import Job, plan_job
from packer.conversion.merging import unwritten_shards
from packer.conversion.options import ConversionOptions, conversion_options, option_keywords
from packer.conversion.plan import shard_name, shards_of_task

__all__ = ["TaskResult", "convert_task", "run_conversion_task"]


@dataclass(frozen=True)
class TaskResult:
    """What one array task did: its shards (written now or kept from an earlier attempt)."""

    dst: str
    task_id: int
    num_tasks: int
    shards: tuple[str, ...]
    written: int
    kept: int
    samples: int
    skipped: int
    seconds: float
    bytes_in: int
    missing: tuple[str, ...]
    already_complete: bool = False


@option_keywords
def convert_task(src: str | os.PathLike[str], dst: str | os.PathLike[str],
                 options: ConversionOptions | None = None, *, task_id: int, num_tasks: int,
                 workers: int | None = None, engine: Engine | None = None, progress: bool = False,
                 **option_values: Any) -> TaskResult:
    """Array task ``task_id`` of ``num_tasks``: write its share of the shards of ``dst``.

    Every task runs the same command with its own id (ids from 0); they may run at the same
    time, on different machines, into one DST on shared storage. Task ``I`` writes the shards
    numbered ``I, I + N, I + 2N, ...`` (:func:`packer.conversion.plan.shards_of_task`), keeps those an
    earlier attempt finished, and writes no manifest: run :func:`packer.merge` (``packer
    merge DST``) once all tasks are done. The result equals a single :func:`convert`'s.
    Options (``options=`` or keywords) are as for :func:`convert`; there is no ``overwrite``
    (clear DST first) and resuming is implicit.

    Raises:
        ValueError: ``task_id`` is not in ``0 .. num_tasks - 1``.
        ResumeError: DST holds another plan (other source, options or task count).
        DatasetBusyError: a ``convert`` or ``merge`` of DST, or this same task, is running.
        PackerError: everything :func:`packer.convert` raises.
    """
    return run_conversion_task(src, dst, conversion_options(options, option_values), task_id=task_id,
                               num_tasks=num_tasks, workers=workers, engine=engine, progress=progress)


def run_conversion_task(src: str | os.PathLike[str], dst: str | os.PathLike[str],
                        options: ConversionOptions, *, task_id: int, num_tasks: int,
                        workers: int | None = None, engine: Engine | None = None,
                        progress: bool = False) -> TaskResult:
    """:func:`convert_task` with its options already built: what the command line calls."""
    started = time.perf_counter()
    chosen = choose_engine(engine, workers)
    if num_tasks < 1 or not 0 <= task_id < num_tasks:
        raise ValueError(f"task id must be from 0 to {num_tasks - 1} for {num_tasks} tasks, not {task_id}")
    job = plan_job(src, dst, options, overwrite=False, resume=True, num_tasks=num_tasks)
    with job.source:  # what reading made on this machine (an archive's spool) goes at the end
        return _write_task(job, chosen, task_id=task_id, num_tasks=num_tasks, progress=progress,
                           started=started)


def _write_task(job: Job, chosen: Engine, *, task_id: int, num_tasks: int, progress: bool,
                started: float) -> TaskResult:
    """Write this task's share of a planned job's shards (keeping those already finished)."""
    destination, plan = job.destination, job.plan
    if job.state == "complete":
        destination.ensure_complete(plan.fingerprint)  # or raise: a dataset of another plan
        names = tuple(shard_name(i) for i in shards_of_task(len(job.tasks), task_id, num_tasks))
        return TaskResult(job.dst, task_id, num_tasks, names, 0, len(names), 0, 0,
                          time.perf_counter() - started, 0, (), already_complete=True)
    with task_slot(destination, plan, task_id) as slot:
        job.source.save_scans()  # for the other tasks: DST is the job's now
        mine, kept = slot.shards, slot.kept
        names = tuple(shard_name(i) for i in mine)
        todo = [job.tasks[i] for i in mine if i not in kept]
        results = write_shards(job, todo, kept, slot.staging, chosen, progress=progress)
    missing = unwritten_shards(job.dst, plan)  # for the summary; merge checks them properly
    written = {i: r for i, r in results.items() if i not in kept}
    return TaskResult(job.dst, task_id, num_tasks, names, len(written), len(kept),
                      sum(len(r.relpaths) for r in results.values()),
                      sum(len(r.skipped) for r in results.values()), time.perf_counter() - started,
                      sum(r.bytes_in for r in written.values()),
                      tuple(shard_name(i) for i in missing))
