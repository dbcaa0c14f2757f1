"""A conversion before anything is written: DST checked, SRC scanned, the shards planned.

:func:`plan_job` is the first half of :func:`packer.convert` and of every array task; it raises
every error a conversion can know of in advance, and touches nothing. SRC is any kind of source
(:mod:`packer.source.registry`); from here on only its items, identities and reader matter.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from packer.conversion.destination.resume import (
    item_identities,
    plan_fingerprint,
    shard_fingerprint,
    shard_inputs,
)
from packer.conversion.destination.state import SCANS_DIR, Destination, DestinationState
from packer.conversion.options import ConversionOptions
from packer.conversion.outcome import check_something_to_pack
from packer.conversion.plan import JobPlan, planned_item_sizes, scan_info, shard_name
from packer.conversion.schemas import conversion_schema
from packer.conversion.sharding import plan_shards
from packer.conversion.tasks import ShardTask
from packer.digests import LEGACY_DIGEST
from packer.source.base import ItemReader, Source, SourceIndex
from packer.source.registry import open_source

__all__ = ["Job", "plan_job", "plan_source", "scan_source"]


@dataclass(frozen=True)
class Job:
    """A checked, scanned and planned conversion, before anything is written."""

    src: str
    destination: Destination
    state: DestinationState  # DST's state when it was checked
    source: Source
    index: SourceIndex
    reader: ItemReader
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
    source = open_source(src, options.source_options)
    destination = Destination(dst)
    state = destination.check(source.inside(), overwrite=overwrite, resume=resume, task=num_tasks is not None)
    if state is not DestinationState.COMPLETE:  # for array tasks and resumes; gone once complete
        source.keep_scans_in(os.path.join(destination.path, SCANS_DIR))
    if resume and state is DestinationState.PARTIAL:
        options = with_plan_digest(destination, options)
    return plan_source(source, destination, state, options, num_tasks=num_tasks)


def with_plan_digest(destination: Destination, options: ConversionOptions) -> ConversionOptions:
    """``options`` with the checksum algorithm the plan in ``destination`` records, when none
    was given.

    Without ``digest``, each machine resolves its own default (BLAKE3 where the wheel is,
    SHA-256 elsewhere), so an array task on the other kind of machine, or a resume after the
    wheel came or went, would refuse the plan as one of other options. It follows the plan
    instead, or, where the plan's algorithm is not installed, raises MissingExtraError naming
    the extra, before anything is written.
    """
    recorded = destination.marker().get("options")
    if options.digest_given or not isinstance(recorded, dict):
        return options  # chosen, or no plan recorded yet: this machine's default
    digest = recorded.get("digest", LEGACY_DIGEST)
    return options if digest == options.digest else replace(options, digest=digest)


def scan_source(src: str | os.PathLike[str], options: ConversionOptions) -> tuple[Source, SourceIndex]:
    """Open SRC as the kind of source it is (or ``options`` names) and scan it.

    Raises:
        SourceError: SRC cannot be used; the message names the file and the fix.
    """
    source = open_source(src, options.source_options)
    return source, source.scan()


def plan_source(source: Source, destination: Destination, state: DestinationState,
                options: ConversionOptions, *, num_tasks: int | None) -> Job:
    """Scan ``source`` and plan its shards for ``destination``; touch nothing."""
    index = source.scan()
    reader = source.reader()
    check_something_to_pack(source, index, reader)
    options = options.for_source(source.kind)
    recorded = options.recorded()
    schema = conversion_schema(index, options)
    if schema is not None:  # fingerprinted and recorded; an ImageFolder conversion's record is unchanged
        recorded["schema"] = schema.to_list()
    fingerprint = plan_fingerprint(source.location, recorded, index, index.metadata)
    codec = options.stored_as
    plans = plan_shards(planned_item_sizes(index, reader, codec), [item.relpath for item in index.items],
                        options.shard_bytes)
    items = [index.items[p.start:p.stop] for p in plans]
    metadata = [index.metadata[p.start:p.stop] if index.metadata else () for p in plans]
    fingerprints = tuple(shard_fingerprint(p.index, recorded, item_identities(items[p.index], labels=True),
                                           metadata[p.index])
                         for p in plans)
    inputs = tuple(shard_inputs(recorded, item_identities(shard, labels=False),
                                metadata[i] if schema is not None else ())  # fields are in records
                   for i, shard in enumerate(items))
    extra = {**source.manifest_extra(),
             "source": {"kind": source.kind, "location": source.location, "params": source.params(),
                        "report": {"notes": list(index.report.notes)} if index.report.notes else {}},
             **({"schema": schema.to_list()} if schema is not None else {})}
    plan = JobPlan(source.location, recorded, fingerprint, len(index.items), tuple(index.classes),
                   scan_info(index, source.scan_filter()),
                   fingerprints, inputs, num_tasks, extra, index.metadata_columns)
    tasks = tuple(ShardTask(p.index, shard_name(p.index), reader, destination.path, "",
                            options.backend.name, codec, options.check, options.max_pixels,
                            options.strict, p.planned_bytes, items[p.index], fingerprints[p.index],
                            inputs[p.index], recorded, metadata[p.index], schema=schema,
                            digest=plan.digest)
                  for p in plans)
    return Job(source.location, destination, state, source, index, reader, plan, tasks)
