"""``packer update SRC DST``: bring a packed dataset up to date with its source, as a new version.

The result is what a fresh ``packer convert`` of today's SRC with DST's recorded options gives
(same samples, order, labels and shard files; only ``created_at``, ``version`` and
``last_update`` differ), written cheaply: shard boundaries are content-defined
(:mod:`packer.conversion.sharding`), so only shards near a change are planned differently, and
a planned shard whose inputs are unchanged is the current version's file, kept
(:mod:`packer.conversion.maintenance.changes`). Only the other shards are written.

The order of events is the safety contract. DST stays a complete dataset at its current
version throughout: ``.packer-update`` records the update; new shards are written through
``DST/.tmp`` under names their contents give, next to the current version's (which are never
touched); then the new sample index, ``versions/<n+1>.json`` and ``index.json`` last,
atomically: the switch. A reader that opened version ``n`` keeps reading it (its workers reopen
``versions/<n>.json``), until ``packer gc`` removes what no kept version uses. An update killed
at any instant leaves version ``n`` complete; running it again (``--resume`` says so) keeps
every shard it finished and ends with the same version an uninterrupted run gives.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from packer.conversion.destination.lifecycle import tidy_after_update, update_slot
from packer.conversion.destination.lock import dataset_lock
from packer.conversion.destination.state import Destination, DestinationState
from packer.conversion.engines.base import Engine
from packer.conversion.execution import choose_engine, write_shards
from packer.conversion.job import Job, plan_source
from packer.conversion.maintenance.changes import Changes, compare, describe_record, source_digests
from packer.conversion.maintenance.gc import GcResult, collect_garbage
from packer.conversion.merging import build_manifest
from packer.conversion.options import ConversionOptions
from packer.conversion.tasks import ShardTask
from packer.errors import NotADatasetError, OutputError
from packer.format.backends import get_backend
from packer.format.manifest import Manifest
from packer.format.sample_index import SampleIndex
from packer.source.registry import open_source
from packer.store.lease.claim import Lease

__all__ = ["UpdateResult", "update"]

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class UpdateResult:
    """What :func:`update` found and did (with ``dry_run``, what it would do)."""

    dst: str
    manifest: Manifest  # the dataset's manifest after the update (unchanged when up to date)
    from_version: int
    files_added: int
    files_removed: int
    files_changed: int
    shards_reused: int
    shards_written: int  # with dry_run: shards that would be written
    bytes_written: int  # with dry_run: the planned bytes of those shards
    seconds: float
    up_to_date: bool = False
    dry_run: bool = False
    resumed_shards: int = 0  # shards an interrupted run of this update had finished
    collected: GcResult | None = None

    @property
    def version(self) -> int:
        """The dataset's version now."""
        return self.manifest.version


def update(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, checksum: bool = False,
           dry_run: bool = False, workers: int | None = None, engine: Engine | None = None,
           keep_versions: int | None = None, strict: bool = False,
           is_valid_file: Callable[[str], bool] | None = None, progress: bool = False) -> UpdateResult:
    """Make DST, a complete packed dataset, a new version equal to a fresh conversion of ``src``.

    Args:
        src: The source as it is now: the tree (or list file) DST was converted from, or its copy.
        dst: A complete dataset of packer 0.2 or later (format 2).
        checksum: Compare files by content (read and hash every source file) instead of by
            size and modification time.
        dry_run: Say what would change and be written; write nothing.
        workers: Worker processes packing the shards to write (default: the usable CPUs).
        engine: Where they run instead, as for :func:`packer.convert`; not with ``workers``.
        keep_versions: After the update (or finding DST up to date), run
            :func:`~packer.conversion.maintenance.gc.collect_garbage` keeping this many versions (default:
            keep every version until ``packer gc``).
        strict: Stop at the first file that cannot be packed, as for ``convert``.
        is_valid_file: The filter DST was converted with, if it was (it cannot be recorded).
        progress: Show a progress bar.

    Raises:
        NotADatasetError, IncompleteDatasetError: DST is not a complete dataset.
        OutputError: DST was written by packer 0.1 (format 1):
            :func:`~packer.conversion.maintenance.upgrading.upgrade` it first.
        DatasetBusyError: another process (an update, gc, convert, merge) holds DST's lease;
            the message names it.
        SourceError, ConversionError, ...: as :func:`packer.convert`.
    """
    started = time.perf_counter()
    chosen = choose_engine(engine, workers)
    destination = Destination(dst)
    path = destination.path
    if destination.state is not DestinationState.COMPLETE:
        Manifest.load(path)  # the precise error for an incomplete or missing DST
        raise NotADatasetError(f"{path!r} is not a packer dataset: give the DST of a conversion.")
    with contextlib.ExitStack() as stack:
        lease = None if dry_run else stack.enter_context(dataset_lock(path, "update"))
        current = Manifest.load(path)
        job = _plan(src, destination, current, strict=strict, is_valid_file=is_valid_file)
        stack.enter_context(job.source)  # an archive's spool, if reading makes one, goes at the end
        digests = source_digests(job, chosen.parallelism, current.digest_algorithm) if checksum else None
        changes = compare(current, SampleIndex.of(path, current), job, digests=digests)
        todo = [task for task in job.tasks if task.index not in changes.reused]
        up_to_date = _up_to_date(current, job, changes)
        if lease is not None and up_to_date and tidy_after_update(path, lease):
            log.info("%s: removed what an update killed after its switch left behind", path)
        if lease is None or up_to_date:
            result = UpdateResult(path, current, current.version, changes.added, changes.removed,
                                  changes.changed, len(changes.reused), len(todo),
                                  sum(_estimate(t) for t in todo), time.perf_counter() - started,
                                  up_to_date=up_to_date, dry_run=dry_run)
        else:
            result = _write_version(job, current, changes, todo, chosen, lease, checksum=checksum,
                                    progress=progress, started=started)
    if keep_versions and not dry_run:  # after the lock is released: gc takes it
        result = replace(result, collected=collect_garbage(path, keep_versions=keep_versions))
    return result


def _write_version(job: Job, current: Manifest, changes: Changes, todo: list[ShardTask], engine: Engine,
                   lease: Lease, *, checksum: bool, progress: bool, started: float) -> UpdateResult:
    """Write the shards of ``todo`` (those an interrupted run of this update finished are kept),
    then the new version's sample index and manifest, and switch ``index.json`` to it."""
    path = job.dst
    with update_slot(job.destination, job.plan, current.version, lease) as slot:
        kept = slot.kept
        todo = [task for task in todo if task.index not in kept]
        results = write_shards(job, todo, {**changes.reused, **kept}, slot.staging, engine, progress=progress)
        written = [r for i, r in results.items() if i not in changes.reused]
        bytes_written = sum(r.entry.num_bytes for r in written)
        record = describe_record(changes, len(written), bytes_written, from_version=current.version,
                                 checksum=checksum)
        try:
            manifest = slot.commit(lambda: build_manifest(
                path, job.plan, [results[i] for i in range(len(job.tasks))], version=current.version + 1,
                last_update=record))
        except OSError as err:
            raise OutputError(f"Writing version {current.version + 1} of {path!r} failed: "
                              f"{err.strerror or err}. Fix it (free space?), then run the same "
                              "update() again.") from err
    log.info("updated %s to version %d: %d shards written, %d reused", path, manifest.version,
             len(written), len(changes.reused))
    return UpdateResult(path, manifest, current.version, changes.added, changes.removed, changes.changed,
                        len(changes.reused), len(written), bytes_written, time.perf_counter() - started,
                        resumed_shards=len(kept))


def _plan(src: str | os.PathLike[str], destination: Destination, current: Manifest, *, strict: bool,
          is_valid_file: Callable[[str], bool] | None) -> Job:
    """Plan a conversion of ``src`` with the options DST recorded."""
    recorded = current.extra.get("options")
    if current.format_version < 2:
        raise OutputError(f"{destination.path!r} was written by packer 0.1 (format "
                          f"{current.format_version}), which recorded no source identities: upgrade it "
                          "first with upgrade(src, dst), which rewrites no shard; then update() works "
                          "on it.")
    if not isinstance(recorded, dict):
        raise OutputError(f"{destination.path!r} records no conversion options (its manifest lacks "
                          "extra.options): convert its source again with convert(src, dst, "
                          "overwrite=True).")
    try:
        options = ConversionOptions.from_recorded(recorded, strict=strict, is_valid_file=is_valid_file)
    except ValueError as err:
        raise OutputError(f"Cannot update {destination.path!r}: {err}.") from err
    source = open_source(src, options.source_options)
    return plan_source(source, destination, DestinationState.COMPLETE, options, num_tasks=None)


def _estimate(task: ShardTask) -> int:
    """About the bytes the shard of ``task`` will take on disk (the backend's arithmetic)."""
    if not task.codec.keeps_source_bytes:
        return task.planned_bytes
    estimate = get_backend(task.backend).estimate_shard_bytes([max(item.size, 0) for item in task.items])
    return task.planned_bytes if estimate is None else estimate


def _up_to_date(current: Manifest, job: Job, changes: Changes) -> bool:
    """Nothing to write and the same plan: a new version would equal the current one."""
    return (len(changes.reused) == len(job.tasks)
            and current.extra.get("plan_fingerprint") == job.plan.fingerprint
            and [shard.inputs for shard in current.shards] == list(job.plan.shard_inputs))
