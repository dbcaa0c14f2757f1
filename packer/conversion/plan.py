"""The plan of a conversion (:func:`plan_job`), recorded in DST so that any process can finish
or merge it.

A conversion writes its plan into the in-progress marker before any shard: the source and
options with their fingerprint, the classes and how the tree was scanned, and every shard's
file name and input fingerprint. With the shards' receipts, that is all ``packer merge``
needs to write the manifest, in whichever process or machine runs last, without scanning
the source again. Array tasks (``--num-tasks N --task-id I``) share one plan: the first to
start records it (atomically, create-if-absent), the others check that theirs is the same.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from packer.format.backends import get_backend
from packer.format.codecs import CHECK_LEVELS, Codec, OriginalCodec, get_codec
from packer.conversion.destination import check_destination
from packer.format.durable import fsync_dir
from packer.errors import OutputError, ResumeError
from packer.source.imagecheck import image_dimensions
from packer.source.imagefolder import IMG_EXTENSIONS, FolderIndex, scan_imagefolder
from packer.format.manifest import IN_PROGRESS_NAME, ScanInfo
from packer.conversion.sharding import plan_shards
from packer.conversion.resume import plan_fingerprint, shard_fingerprint
from packer.conversion.tasks import ShardTask
from packer.sizes import parse_size

__all__ = ["Job", "JobPlan", "claim_destination", "plan_job", "planned_item_sizes", "scan_info", "shard_name",
           "shards_of_task"]


@dataclass(frozen=True)
class JobPlan:
    """What a conversion will write; equal plans give byte-identical datasets."""

    source: str
    options: dict[str, Any]
    fingerprint: str
    items: int
    classes: tuple[str, ...]
    scan: ScanInfo
    shard_names: tuple[str, ...]
    shard_fingerprints: tuple[str, ...]
    num_tasks: int | None = None

    def to_marker(self) -> dict[str, Any]:
        """The marker's JSON content (``shards`` and the rest kept for older readers)."""
        data = asdict(self)
        data["shards"] = len(self.shard_names)
        return data

    @classmethod
    def from_marker(cls, data: dict[str, Any], dst: str) -> JobPlan:
        """The plan a marker recorded.

        Raises:
            OutputError: the marker holds no plan (a run stopped before writing one, or an
                older packer's); the message says how to go on.
        """
        try:
            return cls(
                source=str(data["source"]), options=dict(data["options"]),
                fingerprint=str(data["fingerprint"]), items=int(data["items"]),
                classes=tuple(data["classes"]), scan=ScanInfo(**_tuples(data["scan"])),
                shard_names=tuple(data["shard_names"]),
                shard_fingerprints=tuple(data["shard_fingerprints"]),
                num_tasks=data.get("num_tasks"))
        except (KeyError, TypeError, ValueError):
            raise OutputError(f"The conversion in {dst!r} did not record its plan (it stopped before "
                              "writing anything, or an older packer started it): run the same "
                              "`packer convert` with --resume, or start again with --overwrite.") from None

    def task_of(self, shard: int) -> int | None:
        """Which array task writes shard number ``shard`` (None when not an array job)."""
        return None if self.num_tasks is None else shard % self.num_tasks


def _tuples(scan: dict[str, Any]) -> dict[str, Any]:
    return {key: tuple(value) if isinstance(value, list) else value for key, value in scan.items()}


def shards_of_task(num_shards: int, task_id: int, num_tasks: int) -> list[int]:
    """Shard numbers task ``task_id`` of ``num_tasks`` writes: every ``num_tasks``-th, from it.

    Round robin rather than contiguous ranges: neighbouring shards hold neighbouring classes
    of similar sizes, so each task gets a like share of the bytes. Every shard belongs to
    exactly one task; a task may get none when there are more tasks than shards.
    """
    if num_tasks < 1 or not 0 <= task_id < num_tasks:
        raise ValueError(f"task id must be from 0 to {num_tasks - 1} for {num_tasks} tasks, not {task_id}")
    return list(range(task_id, num_shards, num_tasks))


def claim_destination(dst: str, plan: JobPlan) -> None:
    """Record ``plan`` in DST's marker unless another task already did; then check it is ours.

    The marker appears atomically (written aside, then hard-linked into place, which fails
    if the name exists, on local disks and NFS alike), so tasks starting together agree.

    Raises:
        ResumeError: DST holds the plan of another source, other options or another task count.
    """
    os.makedirs(dst, exist_ok=True)
    marker = os.path.join(dst, IN_PROGRESS_NAME)
    aside = os.path.join(dst, f".{IN_PROGRESS_NAME}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    with open(aside, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(plan.to_marker(), indent=2, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(aside, marker)
    except FileExistsError:
        pass
    else:
        fsync_dir(dst)
    finally:
        os.unlink(aside)
    with open(marker, encoding="utf-8") as handle:
        recorded = json.load(handle)
    theirs = recorded.get("fingerprint") if isinstance(recorded, dict) else None
    if theirs != plan.fingerprint:
        raise ResumeError(f"{dst!r} holds a conversion of another source tree or other options: "
                          "every array task must run the same command. Use a new DST, or finish "
                          "that conversion first.")
    if recorded.get("num_tasks") != plan.num_tasks:
        raise ResumeError(f"{dst!r} is being converted as {recorded.get('num_tasks')} tasks, not "
                          f"{plan.num_tasks}: every array task must use the same --num-tasks.")


def shard_name(index: int, suffix: str) -> str:
    """File name of shard ``index``: ``shard-00000.lmdb``."""
    return f"shard-{index:05d}{suffix}"


def planned_item_sizes(index: FolderIndex, codec: Codec) -> list[int]:
    """What each source file will take in a shard, for planning: its size for ``original``;
    for codecs that decode, an estimate from the image's header (read, not decoded)."""
    if isinstance(codec, OriginalCodec):
        return [item.size for item in index.items]
    return [codec.planned_bytes(image_dimensions(index.path_of(item)), max(item.size, 0))
            for item in index.items]


def scan_info(index: FolderIndex, is_valid_file: Callable[[str], bool] | None) -> ScanInfo:
    """How the tree was scanned, for the manifest."""
    report = index.report
    return ScanInfo(
        filter="is_valid_file" if is_valid_file is not None else "extensions",
        extensions=IMG_EXTENSIONS if is_valid_file is None else (),
        include_hidden=index.include_hidden,
        symlink_loops="walked_once",
        ignored_hidden=report.ignored_hidden,
        cut_symlink_loops=report.cut_symlink_loops,
        unreadable_dirs=report.unreadable_dirs,
        other_files=report.other_files,
        root_files=report.root_files,
    )


@dataclass(frozen=True)
class Job:
    """A checked, scanned and planned conversion, before anything is written."""

    src: str
    dst: str
    state: str
    index: FolderIndex
    plan: JobPlan
    tasks: tuple[ShardTask, ...]  # one per planned shard; staging set when run


def plan_job(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, to: str,
             shard_size: int | str, codec: str, codec_options: Mapping[str, Any] | None, check: str,
             max_pixels: int, strict: bool, overwrite: bool, resume: bool, include_hidden: bool,
             allow_empty: bool, is_valid_file: Callable[[str], bool] | None,
             num_tasks: int | None) -> Job:
    """Validate the options, check DST (touching nothing), scan SRC and plan the shards.

    Raises what :func:`packer.convert` raises before it writes anything.
    """
    backend = get_backend(to)
    chosen_codec = get_codec(codec, codec_options)
    if check not in CHECK_LEVELS:
        raise ValueError(f"check must be one of {', '.join(CHECK_LEVELS)}, not {check!r}")
    if max_pixels <= 0:
        raise ValueError(f"max_pixels must be positive, not {max_pixels}")
    planned_size = parse_size(shard_size)
    src_path, dst_path = os.path.abspath(os.fspath(src)), os.path.abspath(os.fspath(dst))
    state = check_destination(dst_path, src_path, overwrite=overwrite, resume=resume)
    index = scan_imagefolder(src_path, is_valid_file=is_valid_file, allow_empty=allow_empty,
                             include_hidden=include_hidden)
    options: dict[str, Any] = {
        "backend": backend.name, "codec": chosen_codec.name, "codec_params": chosen_codec.params(),
        "check": check, "max_pixels": max_pixels, "shard_size": planned_size,
        "include_hidden": include_hidden, "allow_empty": allow_empty,
        "filter": "is_valid_file" if is_valid_file is not None else "extensions",
    }
    fingerprint = plan_fingerprint(src_path, options, index)
    plans = plan_shards(planned_item_sizes(index, chosen_codec), planned_size)
    names = tuple(shard_name(plan.index, backend.suffix) for plan in plans)
    items = [tuple((it.relpath, it.label, it.size) for it in index.items[p.start:p.stop]) for p in plans]
    fingerprints = tuple(shard_fingerprint(p.index, options, items[p.index]) for p in plans)
    plan = JobPlan(src_path, options, fingerprint, len(index.items), tuple(index.classes),
                   scan_info(index, is_valid_file), names, fingerprints, num_tasks)
    tasks = tuple(ShardTask(p.index, names[p.index], src_path, dst_path, "", backend.name,
                            chosen_codec.name, check, max_pixels, strict, p.planned_bytes,
                            items[p.index], fingerprints[p.index], chosen_codec.params())
                  for p in plans)
    return Job(src_path, dst_path, state, index, plan, tasks)
