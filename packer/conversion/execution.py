"""Write planned shards on an engine, with one progress bar, then the manifest: the middle of
every conversion (to a local DST, to a URL through its staging folder, from Python)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from packer.conversion.destination.lifecycle import conversion_slot
from packer.conversion.destination.resume import check_resumable
from packer.conversion.engines.base import Engine, Progress
from packer.conversion.engines.local import LocalEngine
from packer.conversion.job import Job
from packer.conversion.merging import build_manifest
from packer.conversion.outcome import check_something_packed
from packer.conversion.receipts import ShardResult
from packer.conversion.scheduling import Collector, make_tasks
from packer.conversion.tasks import ShardTask
from packer.cpus import available_cpus
from packer.errors import OutputError
from packer.format.manifest import Manifest
from packer.progressbar import ProgressBar

__all__ = ["ConversionResult", "choose_engine", "write_job", "write_shards"]

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class ConversionResult:
    """What a conversion did: the manifest it wrote and how long and how much it took."""

    dst: str
    manifest: Manifest
    found: int
    seconds: float
    bytes_in: int
    resumed_shards: int = 0
    already_complete: bool = False

    @property
    def images_per_second(self) -> float:
        """Samples packed per second of wall time."""
        return self.manifest.num_samples / self.seconds if self.seconds > 0 else 0.0


def write_job(job: Job, chosen: Engine, *, resume: bool, progress: bool, started: float,
              on_shard: Callable[[ShardResult], None] | None = None) -> ConversionResult:
    """Write the shards of a planned job (keeping those an interrupted run finished with
    ``resume``), then its manifest; ``on_shard`` sees each shard written or kept, as it is."""
    destination, plan = job.destination, job.plan
    if resume and job.state == "complete":
        manifest = destination.ensure_complete(plan.fingerprint)
        return ConversionResult(job.dst, manifest, plan.items, time.perf_counter() - started, 0,
                                resumed_shards=len(manifest.shards), already_complete=True)
    if resume and job.state == "partial":
        marker = destination.marker()
        check_resumable(job.dst, marker, plan.fingerprint, job.src, plan.options, plan.items)
        # An array job's plan names its task count; finishing it here is one task of one.
        plan = replace(plan, num_tasks=marker.get("num_tasks"))
    with conversion_slot(destination, plan, keep=resume, expected=job.state) as slot:
        job.source.save_scans()  # DST is this conversion's now: a resume may reuse the scan
        kept = slot.kept
        todo = [task for task in job.tasks if task.index not in kept]
        if on_shard is not None:
            for result in kept.values():
                on_shard(result)
        results = write_shards(job, todo, kept, slot.staging, chosen, progress=progress, on_shard=on_shard)
        check_something_packed(job.source, job.dst, sum(len(r.relpaths) for r in results.values()),
                               (s.reason for r in results.values() for s in r.skipped))
        try:
            manifest = slot.commit(lambda: build_manifest(job.dst, plan,
                                                          [results[i] for i in range(len(job.tasks))]))
        except OSError as err:
            raise OutputError(f"Writing the manifest of {job.dst!r} failed: {err.strerror or err}. "
                              "Fix it (free space?), then run the same conversion again with "
                              "resume=True.") from err
    seconds = time.perf_counter() - started
    log.info("packed %d samples into %s in %.1f s", manifest.num_samples, job.dst, seconds)
    bytes_in = sum(r.bytes_in for i, r in results.items() if i not in kept)
    return ConversionResult(job.dst, manifest, len(job.index.items), seconds, bytes_in,
                            resumed_shards=len(kept))
