"""A conversion before anything is written: DST checked, SRC scanned, the shards planned.

:func:`plan_job` is the first half of :func:`packer.convert` and of every array task; it raises
every error a conversion can know of in advance, and touches nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from packer.conversion.destination import Destination, DestinationState
from packer.conversion.options import ConversionOptions
from packer.conversion.plan import JobPlan, planned_item_sizes, scan_info, shard_name
from packer.conversion.resume import plan_fingerprint, shard_fingerprint
from packer.conversion.sharding import plan_shards
from packer.conversion.tasks import ShardTask
from packer.source.imagefolder import FolderIndex, scan_imagefolder

__all__ = ["Job", "plan_job"]


@dataclass(frozen=True)
class Job:
    """A checked, scanned and planned conversion, before anything is written."""

    src: str
    destination: Destination
    state: DestinationState  # DST's state when it was checked
    index: FolderIndex
    plan: JobPlan
    tasks: tuple[ShardTask, ...]  # one per planned shard; staging set when run

    @property
    def dst(self) -> str:
        """DST's absolute path."""
        return self.destination.path


def plan_job(src: str | os.PathLike[str], dst: str | os.PathLike[str], options: ConversionOptions, *,
             overwrite: bool, resume: bool, num_tasks: int | None) -> Job:
    """Check DST (touching nothing), scan SRC and plan the shards of a conversion.

    Raises what :func:`packer.convert` raises before it writes anything.
    """
    src_path = os.path.abspath(os.fspath(src))
    destination = Destination(dst)
    state = destination.check(src_path, overwrite=overwrite, resume=resume)
    index = scan_imagefolder(src_path, is_valid_file=options.is_valid_file,
                             allow_empty=options.allow_empty, include_hidden=options.include_hidden)
    recorded = options.recorded()
    fingerprint = plan_fingerprint(src_path, recorded, index)
    codec = options.stored_as
    plans = plan_shards(planned_item_sizes(index, codec), options.shard_bytes)
    names = tuple(shard_name(p.index, options.backend.suffix) for p in plans)
    items = [tuple((it.relpath, it.label, it.size) for it in index.items[p.start:p.stop]) for p in plans]
    fingerprints = tuple(shard_fingerprint(p.index, recorded, items[p.index]) for p in plans)
    plan = JobPlan(src_path, recorded, fingerprint, len(index.items), tuple(index.classes),
                   scan_info(index, options.scan_filter), names, fingerprints, num_tasks)
    tasks = tuple(ShardTask(p.index, names[p.index], src_path, destination.path, "",
                            options.backend.name, codec, options.check, options.max_pixels,
                            options.strict, p.planned_bytes, items[p.index], fingerprints[p.index])
                  for p in plans)
    return Job(src_path, destination, state, index, plan, tasks)
