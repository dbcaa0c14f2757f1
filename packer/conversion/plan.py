"""The plan of a conversion (:class:`JobPlan`), recorded in DST so that any process can finish
or merge it.

A conversion writes its plan into the in-progress marker before any shard: the source and
options with their fingerprint, the classes and how the tree was scanned, and every shard's
file name and input fingerprint. With the shards' receipts, that is all ``packer merge``
needs to write the manifest, in whichever process or machine runs last, without scanning
the source again. Array tasks (``--num-tasks N --task-id I``) share one plan: the first to
start records it (atomically, create-if-absent; see
:func:`packer.conversion.destination.lifecycle.task_slot`), the others check that theirs is the same.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from packer.digests import LEGACY_DIGEST, DigestAlgorithm, get_digest
from packer.errors import OutputError
from packer.format.codecs import Codec
from packer.format.manifest import ScanInfo
from packer.source.base import ItemReader, SourceIndex
from packer.source.imagefolder import IMG_EXTENSIONS

__all__ = ["JobPlan", "describe_shards", "planned_item_sizes", "scan_info", "shard_name", "shards_of_task"]


@dataclass(frozen=True)
class JobPlan:
    """What a conversion will write; equal plans give byte-identical datasets."""

    source: str
    options: dict[str, Any]
    fingerprint: str
    items: int
    classes: tuple[str, ...]
    scan: ScanInfo
    #: Per planned shard: what its receipt must match (inputs, labels and list metadata)...
    shard_fingerprints: tuple[str, ...]
    #: ... and what its manifest entry records to be reused by ``packer update`` (no labels).
    shard_inputs: tuple[str, ...]
    num_tasks: int | None = None
    #: What the manifest's ``extra`` records of the source: ``source`` (kind, location and
    #: params) and, for a list file, ``list`` (its format, columns, root and classes file).
    source_extra: dict[str, Any] = field(default_factory=dict)
    #: The names of the per-sample metadata fields the source gives (none: no metadata).
    metadata_columns: tuple[str, ...] = ()

    @property
    def digest(self) -> DigestAlgorithm:
        """The algorithm of the dataset's checksums, as the options record it (absent: SHA-256)."""
        return get_digest(self.options.get("digest", LEGACY_DIGEST))

    def to_marker(self) -> dict[str, Any]:
        """The marker's JSON content (``shards`` and the rest kept for older readers)."""
        data = asdict(self)
        data["shards"] = len(self.shard_fingerprints)
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
                shard_fingerprints=tuple(data["shard_fingerprints"]),
                shard_inputs=tuple(data["shard_inputs"]),
                num_tasks=data.get("num_tasks"), source_extra=dict(data.get("source_extra") or {}),
                metadata_columns=tuple(data.get("metadata_columns") or ()))
        except (KeyError, TypeError, ValueError):
            raise OutputError(f"The conversion in {dst!r} did not record its plan (it stopped before "
                              "writing anything, or an older packer started it): run the same "
                              "convert(..., resume=True), or start again with overwrite=True.") from None

    @property
    def num_shards(self) -> int:
        """How many shards the plan writes."""
        return len(self.shard_fingerprints)

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


def shard_name(index: int) -> str:
    """How messages and staging files name planned shard ``index`` (``shard-00000``); the
    file it becomes is named by its contents (:func:`packer.format.shardset.shard_file_name`)."""
    return f"shard-{index:05d}"


def describe_shards(plan: JobPlan, numbers: list[int], limit: int = 10) -> str:
    """``shard-00003 (task 3 of 4), ...``: planned shards for a message, at most ``limit``."""
    names = []
    for number in numbers[:limit]:
        task = plan.task_of(number)
        owner = f" (task {task} of {plan.num_tasks})" if task is not None else ""
        names.append(shard_name(number) + owner)
    more = f" and {len(numbers) - limit} more" if len(numbers) > limit else ""
    return ", ".join(names) + more


def planned_item_sizes(index: SourceIndex, reader: ItemReader, codec: Codec) -> list[int]:
    """What each source item will take in a shard, for planning: its size for ``original``;
    for codecs that decode, an estimate from the image's header (read, not decoded)."""
    if codec.keeps_source_bytes:
        return [item.size for item in index.items]
    return [codec.planned_bytes(reader.dimensions(item), max(item.size, 0)) for item in index.items]


def scan_info(index: SourceIndex, scan_filter: str) -> ScanInfo:
    """How the source was scanned, for the manifest (``scan_filter``: ``"extensions"`` or
    ``"is_valid_file"`` for a tree, else the kind of source: ``"list"``, ``"archive"``, ...)."""
    report = index.report
    return ScanInfo(
        filter=scan_filter,
        extensions=IMG_EXTENSIONS if scan_filter == "extensions" else (),
        include_hidden=index.include_hidden,
        symlink_loops="walked_once",
        ignored_hidden=report.ignored_hidden,
        cut_symlink_loops=report.cut_symlink_loops,
        unreadable_dirs=report.unreadable_dirs,
        other_files=report.other_files,
        root_files=report.root_files,
    )
