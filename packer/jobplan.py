"""The plan of a conversion, recorded in DST so that any process can finish or merge it.

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
from dataclasses import asdict, dataclass, field
from typing import Any

from packer.durable import fsync_dir
from packer.errors import OutputError, ResumeError
from packer.manifest import IN_PROGRESS_NAME, ScanInfo

__all__ = ["JobPlan", "claim_destination", "shards_of_task"]


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
    extra: dict[str, Any] = field(default_factory=dict)

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
                num_tasks=data.get("num_tasks"), extra=dict(data.get("extra") or {}))
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
