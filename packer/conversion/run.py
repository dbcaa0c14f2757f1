"""Convert an ImageFolder tree into a packed dataset: scan, plan, write shards in parallel, commit.

The order of events is the crash-safety contract: DST is checked (nothing touched), SRC is scanned
and planned, DST's lease is taken (a second conversion into it is refused with the name of the
process converting) and DST is marked "in progress" with the plan
(:func:`~packer.conversion.destination.lifecycle.conversion_slot`), the shard tasks run on an engine
(:mod:`packer.conversion.engines`: local worker processes by default), each writing its shard under
``DST/.tmp``, fsyncing, hashing, renaming it into place and leaving a receipt; then the sample index
is written, and ``index.json`` last, atomically (:mod:`packer.conversion.merging`). A run killed at
any instant leaves a DST that readers reject as incomplete and that ``resume`` finishes, keeping
every finished shard. Every file with an image name is packed or listed in ``skipped`` with a
reason. The output depends neither on the number of workers nor on the engine, nor on whether the
shards were written by one run or by array tasks (:func:`packer.conversion.array_run.convert_task`)
and merged.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from packer.conversion.destination.lifecycle import conversion_slot
from packer.conversion.destination.resume import check_resumable
from packer.conversion.engines.base import Engine
from packer.conversion.execution import choose_engine, write_shards
from packer.conversion.job import Job, plan_job
from packer.conversion.merging import build_manifest
from packer.conversion.options import (
    DEFAULT_SHARD_SIZE,
    ConversionOptions,
    conversion_options,
    option_keywords,
)
from packer.conversion.outcome import check_something_packed
from packer.conversion.receipts import ShardResult
from packer.errors import OutputError
from packer.format.manifest import Manifest

__all__ = ["DEFAULT_SHARD_SIZE", "ConversionResult", "convert", "run_conversion", "write_job"]

log = logging.getLogger(__name__)


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


@option_keywords
def convert(src: str | os.PathLike[str], dst: str | os.PathLike[str],
            options: ConversionOptions | None = None, *, overwrite: bool = False, resume: bool = False,
            workers: int | None = None, engine: Engine | None = None, progress: bool = False,
            **option_values: Any) -> ConversionResult:
    """Pack the source ``src`` into shards under ``dst``.

    Args:
        src: Root of an ImageFolder tree, ``src/<class>/**/<image>``; a list file of images and
            labels (plain text, CSV or JSON Lines; see :mod:`packer.source.listfile`); a tar or
            zip archive of a tree, or a tar of per-class tars; WebDataset shards; or Parquet image
            tables. The kind is detected (:mod:`packer.source.registry`) or named by ``source_format``.
        dst: New or empty directory (or an earlier packer dataset, with ``overwrite``).
        options: Every choice that decides the output, as one :class:`ConversionOptions`; or
            give them as keywords instead (``to="lmdb"``, ``shard_size="512MB"``,
            ``codec="jpeg"``, ``check``, ``max_pixels``, ``strict``, ``include_hidden``,
            ``allow_empty``, ``is_valid_file``, ``root``, ``path_column``, ``label_column``,
            ``classes_file``, ``source_format``, ``label_field``, ``image_column``,
            ``drop_unannotated``, ``fields``: each one is documented on
            :class:`ConversionOptions`). ``to`` is required.
        overwrite: Replace an existing packer dataset or interrupted conversion at ``dst``.
        resume: Finish an interrupted conversion of the same source with the same options,
            keeping its finished shards (array tasks' too); on a complete one, do nothing; on
            an empty ``dst``, simply start.
        workers: Worker processes writing shards on this machine (default: the CPUs this
            process may use). The output is byte-identical whatever the number.
        engine: Where the shard tasks run instead (see :mod:`packer.conversion.engines`, and
            :mod:`packer.conversion.engines.dask_cluster` for Dask and Slurm/PBS); not with ``workers``.
        progress: Show a tqdm bar on stderr when it is a terminal.
        **option_values: The fields of :class:`ConversionOptions`, when ``options`` is not given.

    Raises:
        SourceError: SRC is missing, has no classes, has an empty class, or (``strict``) holds
            a bad file (:class:`BadImageError`); :class:`EmptySourceError` when every item is
            skipped (nothing would be packed: no 0-sample dataset is written).
        OutputExistsError: DST is not empty and neither ``overwrite`` nor ``resume`` applies.
        ResumeError: ``resume`` over a run of another source tree or other options.
        OutputError: DST cannot be used (a file, inside SRC, a foreign directory, read-only,
            disk full).
        ConversionError: a worker was killed (out of memory?) or failed;
            :class:`ConversionInterrupted` on Ctrl-C. Finished shards stay for ``resume``.
        UnknownNameError: ``to`` or ``codec`` is not registered.
        TypeError: an unknown option keyword, or both ``options`` and keywords.
    """
    return run_conversion(src, dst, conversion_options(options, option_values), overwrite=overwrite,
                          resume=resume, workers=workers, engine=engine, progress=progress)


def run_conversion(src: str | os.PathLike[str], dst: str | os.PathLike[str], options: ConversionOptions,
                   *, overwrite: bool = False, resume: bool = False, workers: int | None = None,
                   engine: Engine | None = None, progress: bool = False) -> ConversionResult:
    """:func:`convert` with its options already built: what the command line calls.

    Arguments other than ``options`` and errors are as for :func:`convert`.
    """
    started = time.perf_counter()
    chosen = choose_engine(engine, workers)
    job = plan_job(src, dst, options, overwrite=overwrite, resume=resume, num_tasks=None)
    with job.source:  # what reading made on this machine (an archive's spool) goes at the end
        return write_job(job, chosen, resume=resume, progress=progress, started=started)


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
