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
from packer.conversion.resume import plan_fingerprint, shard_fingerprint, shard_inputs
from packer.conversion.sharding import plan_shards
from packer.conversion.tasks import ShardTask
from packer.errors import SourceError
from packer.source.imagefolder import FolderIndex, scan_imagefolder
from packer.source.listfile import ListSource, scan_listfile

__all__ = ["Job", "plan_job", "plan_source", "scan_source", "source_root"]


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
    state = destination.check(source_root(src_path, options), overwrite=overwrite, resume=resume)
    return plan_source(src_path, destination, state, options, num_tasks=num_tasks)


def source_root(src_path: str, options: ConversionOptions) -> str:
    """The folder SRC's files lie under: the tree itself, or a list file's ``--root`` (its folder)."""
    if os.path.isfile(src_path):
        return os.fspath(options.root or os.path.dirname(src_path))
    return src_path


def plan_source(src_path: str, destination: Destination, state: DestinationState,
                options: ConversionOptions, *, num_tasks: int | None) -> Job:
    """Scan SRC (an absolute path) and plan its shards for ``destination``; touch nothing."""
    listed, index = scan_source(src_path, options)
    recorded = options.recorded()
    fingerprint = plan_fingerprint(src_path, recorded, index,
                                   listed.metadata if listed is not None else ())
    codec = options.stored_as
    plans = plan_shards(planned_item_sizes(index, codec), [item.relpath for item in index.items],
                        options.shard_bytes)
    items = [tuple((it.relpath, it.label, it.size, it.mtime_ns) for it in index.items[p.start:p.stop])
             for p in plans]
    metadata = [listed.metadata[p.start:p.stop] if listed is not None else () for p in plans]
    fingerprints = tuple(shard_fingerprint(p.index, recorded, items[p.index], metadata[p.index])
                         for p in plans)
    inputs = tuple(shard_inputs(recorded, [(relpath, size, mtime) for relpath, _, size, mtime in shard])
                   for shard in items)
    listing = None if listed is None else {
        "list": listed.listfile, "format": listed.format, "root": index.root,
        "path_column": listed.path_column, "label_column": listed.label_column,
        "classes_file": listed.classes_file, "labels": "numbers" if listed.labels_are_numbers else "names",
        "metadata_columns": list(listed.metadata_columns)}
    plan = JobPlan(src_path, recorded, fingerprint, len(index.items), tuple(index.classes),
                   scan_info(index, "list" if listed is not None else options.scan_filter),
                   fingerprints, inputs, num_tasks, listing)
    tasks = tuple(ShardTask(p.index, shard_name(p.index), index.root, destination.path, "",
                            options.backend.name, codec, options.check, options.max_pixels,
                            options.strict, p.planned_bytes, items[p.index], fingerprints[p.index],
                            inputs[p.index], recorded, metadata[p.index], listed is not None)
                  for p in plans)
    return Job(src_path, destination, state, index, plan, tasks)


def scan_source(src: str, options: ConversionOptions) -> tuple[ListSource | None, FolderIndex]:
    """Scan SRC: a list file (:func:`~packer.source.listfile.scan_listfile`) or an ImageFolder tree.

    Raises:
        ValueError: ``is_valid_file`` for a list.
        SourceError: list-only options for a tree; and see the two scanners.
    """
    if os.path.isfile(src):
        if options.is_valid_file is not None:
            raise ValueError("is_valid_file filters a folder tree; a list source packs what it lists "
                             "(filter the list instead)")
        listed = scan_listfile(src, root=options.root, path_column=options.path_column,
                               label_column=options.label_column, classes_file=options.classes_file)
        return listed, listed.index
    if options.list_options:
        flags = ", ".join("--" + name.replace("_", "-").replace("classes-file", "classes")
                          for name in options.list_options)
        raise SourceError(f"{flags} apply to a list file source, but {src!r} is a folder tree: give "
                          "the list file as SRC, or drop the option(s).")
    return None, scan_imagefolder(src, is_valid_file=options.is_valid_file,
                                  allow_empty=options.allow_empty, include_hidden=options.include_hidden)
