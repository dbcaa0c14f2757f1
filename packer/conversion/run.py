"""Convert an ImageFolder tree into a packed dataset: scan, plan, write shards in parallel, commit.

(The module is ``conversion``, not ``convert``, so that ``packer.convert`` is always the function.)

The order of events is the crash-safety contract: DST is checked (nothing touched), SRC is
scanned and planned, DST is marked "in progress" with the plan (:mod:`packer.conversion.plan`), the
shard tasks run on an engine (:mod:`packer.conversion.engines`: local worker processes by default), each
writing its shard under ``DST/.tmp``, fsyncing, hashing, renaming it into place and leaving a
receipt; then the sample index is written, and ``index.json`` last, atomically
(:mod:`packer.merge`). A run killed at any instant leaves a DST that readers reject as
incomplete and that ``resume`` finishes, keeping every finished shard. Every file with an
image name is packed or listed in ``skipped`` with a reason. The output depends neither on the
number of workers nor on the engine, nor on whether the shards were written by one run or by
array tasks (:func:`convert_task`) and merged.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from tqdm import tqdm

from packer.format.codecs import DEFAULT_MAX_PIXELS
from packer.cpus import available_cpus
from packer.conversion.destination import (
    clear_destination,
    discard_staging,
    finish_destination,
    read_marker,
    start_destination,
    task_staging,
)
from packer.conversion.engines.base import Engine, Progress
from packer.conversion.engines.local import LocalEngine
from packer.errors import OutputError
from packer.conversion.plan import Job, claim_destination, plan_job, planned_item_sizes, shard_name, shards_of_task
from packer.format.manifest import Manifest
from packer.conversion.merging import build_manifest, unwritten_shards
from packer.conversion.resume import check_resumable, keep_finished_shards
from packer.conversion.scheduling import Collector, make_tasks
from packer.conversion.tasks import ShardResult, ShardTask

__all__ = ["DEFAULT_SHARD_SIZE", "ConversionResult", "TaskResult", "convert", "convert_task",
           "planned_item_sizes", "shard_name"]

log = logging.getLogger(__name__)

DEFAULT_SHARD_SIZE = 1 << 30


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


class _ThreadlessTqdm(tqdm):  # type: ignore[misc]
    """tqdm without its monitor thread: a thread would make workers start by (slow) spawn
    instead of fork (see packer.conversion.engines.local); this bar does not need the monitor."""

    monitor_interval = 0


class _Bar:
    """One progress bar for the run: it ends at the number of samples packed."""

    def __init__(self, total: int, *, enabled: bool, desc: str) -> None:
        self._bar = _ThreadlessTqdm(total=total, unit="img", disable=None if enabled else True,
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


def _choose_engine(engine: Engine | None, workers: int | None) -> Engine:
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    if engine is not None:
        if workers is not None:
            raise ValueError("give workers or an engine, not both (an engine has its own workers)")
        return engine
    return LocalEngine(workers or available_cpus())


def _run(job: Job, todo: list[ShardTask], kept: dict[int, ShardResult], staging: str, engine: Engine,
         *, progress: bool) -> dict[int, ShardResult]:
    """Write the ``todo`` shards on ``engine``; all finished shards by number."""
    shard_tasks = [replace(task, staging=staging) for task in todo]
    tasks = make_tasks(shard_tasks, engine.parallelism)
    collect = Collector(tasks)
    total = sum(len(task.items) for task in shard_tasks) + sum(
        len(r.relpaths) + len(r.skipped) for r in kept.values())
    bar = _Bar(total, enabled=progress, desc=f"packing {os.path.basename(job.src) or job.src}")
    try:
        for result in kept.values():
            bar.kept(result)
        engine.run(tasks, on_progress=bar.progress, on_result=collect)
    except BaseException:
        collect.abort()
        discard_staging(job.dst, staging)
        raise
    finally:
        bar.close()
    return {**kept, **collect.shards}


def _write_error(dst: str, err: OSError) -> OutputError:
    return OutputError(f"Cannot write to {dst!r}: {err.strerror or err}. Choose a writable "
                       "destination, or fix its permissions and run again.")


def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    to: str,
    shard_size: int | str = DEFAULT_SHARD_SIZE,
    codec: str = "original",
    codec_options: Mapping[str, Any] | None = None,
    check: str = "full",
    max_pixels: int = DEFAULT_MAX_PIXELS,
    strict: bool = False,
    overwrite: bool = False,
    resume: bool = False,
    workers: int | None = None,
    engine: Engine | None = None,
    include_hidden: bool = False,
    allow_empty: bool = False,
    is_valid_file: Callable[[str], bool] | None = None,
    progress: bool = False,
) -> ConversionResult:
    """Pack the ImageFolder tree ``src`` into shards of backend ``to`` under ``dst``.

    Args:
        src: Root of the tree, ``src/<class>/**/<image>``.
        dst: New or empty directory (or an earlier packer dataset, with ``overwrite``).
        to: Backend name, ``"lmdb"`` or ``"hdf5"``.
        shard_size: Planned bytes per shard, as a number or text such as ``"512MB"``.
        codec: How images are stored; ``"original"`` keeps the source bytes untouched,
            ``"jpeg"`` re-encodes, ``"pixels"`` stores decoded RGB (see packer.format.codecs.reencode).
        codec_options: The codec's options: ``{"quality": 90, "resize": 256}`` for ``jpeg``,
            ``{"resize": 256}`` for ``pixels`` (short side in pixels; never enlarged).
        check: ``"full"`` decodes every image once, ``"header"`` only opens it, ``"none"``
            trusts the files.
        max_pixels: Images with more pixels are skipped as ``decompression_bomb``.
        strict: Stop at the first file that cannot be packed instead of skipping it (with
            several workers, the first one any worker meets).
        overwrite: Replace an existing packer dataset or interrupted conversion at ``dst``.
        resume: Finish an interrupted conversion of the same source with the same options,
            keeping its finished shards (array tasks' too); on a complete one, do nothing; on
            an empty ``dst``, simply start.
        workers: Worker processes writing shards on this machine (default: the CPUs this
            process may use). The output is byte-identical whatever the number.
        engine: Where the shard tasks run instead (see :mod:`packer.conversion.engines`, and
            :mod:`packer.conversion.engines.dask_cluster` for Dask and Slurm/PBS); not with ``workers``.
        include_hidden: Pack names starting with ``.`` too (ImageFolder does; packer does not).
        allow_empty: Accept class folders without images, as ImageFolder's ``allow_empty``.
        is_valid_file: Replaces the extension check; receives each file's full path.
        progress: Show a tqdm bar on stderr when it is a terminal.

    Raises:
        SourceError: SRC is missing, has no classes, has an empty class, or (``strict``) holds
            a bad file (:class:`BadImageError`).
        OutputExistsError: DST is not empty and neither ``overwrite`` nor ``resume`` applies.
        ResumeError: ``resume`` over a run of another source tree or other options.
        OutputError: DST cannot be used (a file, inside SRC, a foreign directory, read-only,
            disk full).
        ConversionError: a worker was killed (out of memory?) or failed;
            :class:`ConversionInterrupted` on Ctrl-C. Finished shards stay for ``resume``.
        UnknownNameError: ``to`` or ``codec`` is not registered.
    """
    started = time.perf_counter()
    chosen = _choose_engine(engine, workers)
    job = plan_job(src, dst, to=to, shard_size=shard_size, codec=codec, codec_options=codec_options,
                   check=check, max_pixels=max_pixels, strict=strict, overwrite=overwrite,
                   resume=resume, include_hidden=include_hidden, allow_empty=allow_empty,
                   is_valid_file=is_valid_file, num_tasks=None)
    plan = job.plan
    if resume and job.state == "complete":
        return _already_complete(job.dst, plan.fingerprint, plan.items, started)
    if resume and job.state == "partial":
        marker = read_marker(job.dst)
        check_resumable(job.dst, marker, plan.fingerprint, job.src, plan.options, plan.items)
        # An array job's plan names its task count; finishing it here is one task of one.
        plan = replace(plan, num_tasks=marker.get("num_tasks"))  # type: ignore[arg-type]
    try:
        if job.state in ("complete", "partial") and not resume:
            clear_destination(job.dst)
        staging = start_destination(job.dst, plan.to_marker())
        kept = (keep_finished_shards(job.dst, list(plan.shard_names), list(plan.shard_fingerprints))
                if resume else {})
    except OSError as err:
        raise _write_error(job.dst, err) from err
    todo = [task for task in job.tasks if task.index not in kept]
    results = _run(job, todo, kept, staging, chosen, progress=progress)
    try:
        manifest = build_manifest(job.dst, plan, [results[i] for i in range(len(job.tasks))])
        finish_destination(job.dst)
    except OSError as err:
        raise OutputError(f"Writing the manifest of {job.dst!r} failed: {err.strerror or err}. "
                          "Fix it (free space?), then run the same command with --resume.") from err
    seconds = time.perf_counter() - started
    log.info("packed %d samples into %s in %.1f s", manifest.num_samples, job.dst, seconds)
    bytes_in = sum(r.bytes_in for i, r in results.items() if i not in kept)
    return ConversionResult(job.dst, manifest, len(job.index.items), seconds, bytes_in,
                            resumed_shards=len(kept))


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


def convert_task(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    task_id: int,
    num_tasks: int,
    to: str,
    shard_size: int | str = DEFAULT_SHARD_SIZE,
    codec: str = "original",
    codec_options: Mapping[str, Any] | None = None,
    check: str = "full",
    max_pixels: int = DEFAULT_MAX_PIXELS,
    strict: bool = False,
    workers: int | None = None,
    engine: Engine | None = None,
    include_hidden: bool = False,
    allow_empty: bool = False,
    is_valid_file: Callable[[str], bool] | None = None,
    progress: bool = False,
) -> TaskResult:
    """Array task ``task_id`` of ``num_tasks``: write its share of the shards of ``dst``.

    Every task runs the same command with its own id (ids from 0); they may run at the same
    time, on different machines, into one DST on shared storage. Task ``I`` writes the shards
    numbered ``I, I + N, I + 2N, ...`` (:func:`packer.conversion.plan.shards_of_task`), keeps those an
    earlier attempt finished, and writes no manifest: run :func:`packer.merge` (``packer
    merge DST``) once all tasks are done. The result equals a single :func:`convert`'s.
    Options are as for :func:`convert`; there is no ``overwrite`` (clear DST first) and
    resuming is implicit.

    Raises:
        ValueError: ``task_id`` is not in ``0 .. num_tasks - 1``.
        ResumeError: DST holds another plan (other source, options or task count).
        Everything :func:`convert` raises.
    """
    started = time.perf_counter()
    chosen = _choose_engine(engine, workers)
    if num_tasks < 1 or not 0 <= task_id < num_tasks:
        raise ValueError(f"task id must be from 0 to {num_tasks - 1} for {num_tasks} tasks, not {task_id}")
    job = plan_job(src, dst, to=to, shard_size=shard_size, codec=codec, codec_options=codec_options,
                   check=check, max_pixels=max_pixels, strict=strict, overwrite=False, resume=True,
                   include_hidden=include_hidden, allow_empty=allow_empty, is_valid_file=is_valid_file,
                   num_tasks=num_tasks)
    plan = job.plan
    mine = shards_of_task(len(job.tasks), task_id, num_tasks)
    names = tuple(plan.shard_names[i] for i in mine)
    if job.state == "complete":
        _already_complete(job.dst, plan.fingerprint, plan.items, started)  # or raise: another plan
        return TaskResult(job.dst, task_id, num_tasks, names, 0, len(names), 0, 0,
                          time.perf_counter() - started, 0, (), already_complete=True)
    try:
        claim_destination(job.dst, plan)
        staging = task_staging(job.dst, task_id, num_tasks)
        kept = keep_finished_shards(job.dst, list(names), [plan.shard_fingerprints[i] for i in mine])
    except OSError as err:
        raise _write_error(job.dst, err) from err
    kept = {mine[position]: result for position, result in kept.items()}
    todo = [job.tasks[i] for i in mine if i not in kept]
    results = _run(job, todo, kept, staging, chosen, progress=progress)
    shutil.rmtree(staging, ignore_errors=True)
    missing = unwritten_shards(job.dst, plan)  # for the summary; merge checks them properly
    written = {i: r for i, r in results.items() if i not in kept}
    return TaskResult(job.dst, task_id, num_tasks, names, len(written), len(kept),
                      sum(len(r.relpaths) for r in results.values()),
                      sum(len(r.skipped) for r in results.values()), time.perf_counter() - started,
                      sum(r.bytes_in for r in written.values()),
                      tuple(plan.shard_names[i] for i in missing))


def _already_complete(dst: str, fingerprint: str, found: int, started: float) -> ConversionResult:
    manifest = Manifest.load(dst)
    if manifest.extra.get("plan_fingerprint") != fingerprint:
        raise OutputError(f"{dst!r} is a complete dataset of another source tree or other options: "
                          "nothing to resume. Choose a new directory, or --overwrite it.")
    return ConversionResult(dst, manifest, found, time.perf_counter() - started, 0,
                            resumed_shards=len(manifest.shards), already_complete=True)
