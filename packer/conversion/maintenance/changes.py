"""What changed between a packed dataset and its source today, and which shards can stay.

:func:`compare` takes the dataset's current manifest and sample index and a fresh plan of its
source (:func:`packer.conversion.job.plan_source`). A planned shard is *reused* when the current
version holds a shard made of the same inputs: the same files with the same size and mtime
(``inputs``), or with ``checksum``, the same bytes (``contents``, for storage whose times cannot
be trusted: every source file is read and hashed). A reused shard's file is kept as it is, and
its samples get today's labels and list metadata (those live in the sample index). Every other
planned shard is written. The file counts compare each path's identity then and now.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from packer.conversion.destination.resume import shard_contents
from packer.conversion.job import Job
from packer.conversion.receipts import ShardResult
from packer.conversion.tasks import field_values
from packer.digests import DigestAlgorithm
from packer.format.manifest import Manifest, ShardEntry, SkippedFile
from packer.format.records import digest_prefix
from packer.format.sample_index import SampleIndex
from packer.source.base import SourceItem

__all__ = ["Changes", "compare", "describe_record", "source_digests"]


@dataclass(frozen=True)
class Changes:
    """Files added, removed and changed since the current version; shards reused, by number."""

    added: int
    removed: int
    changed: int
    reused: dict[int, ShardResult] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """The file counts, as ``last_update`` records them."""
        return {"files_added": self.added, "files_removed": self.removed, "files_changed": self.changed}


def source_digests(job: Job, workers: int, algorithm: DigestAlgorithm) -> dict[str, str]:
    """The digest by ``algorithm`` (the dataset's; hex) of every source item of ``job``, by
    relative path; ``""`` when unreadable. Hashing releases the GIL, so ``workers`` threads
    read and hash in parallel."""
    items = job.index.items
    with ThreadPoolExecutor(max(workers, 1)) as pool:
        found = pool.map(lambda item: job.reader.digest(item, algorithm), items)
        return dict(zip([item.relpath for item in items], found, strict=True))


def compare(current: Manifest, index: SampleIndex, job: Job, *,
            digests: dict[str, str] | None = None) -> Changes:
    """Compare the current version with ``job``'s plan; see the module docstring.

    ``digests`` (from :func:`source_digests`) switches matching to contents.
    """
    # The current version's paths and source identities, read once for both uses below.
    paths_then = [index.path(i) for i in range(current.num_samples)]
    sources = index.sources
    sources_then = sources.tolist() if sources is not None else None
    then = _identities_then(current, paths_then, sources_then)
    label_of = {item.relpath: item.label for item in job.index.items}
    added = removed = changed = 0
    now_paths = set()
    for item in job.index.items:
        now_paths.add(item.relpath)
        old = then.get(item.relpath)
        if old is None:
            added += 1
        elif digests is not None and old[2] is not None:
            changed += old[2] != _short(digests[item.relpath])
        else:
            changed += (old[0], old[1]) != (item.size, item.mtime_ns)
    removed = sum(1 for relpath in then if relpath not in now_paths)
    by_inputs = {shard.inputs: shard for shard in current.shards if shard.inputs}
    by_contents = {shard.contents: shard for shard in current.shards if shard.contents}
    metadata = _metadata_of(job)
    skipped_then = {skip.path: skip for skip in current.skipped}
    reused: dict[int, ShardResult] = {}
    for task in job.tasks:
        if digests is None:
            old_shard = by_inputs.get(task.inputs)
        else:
            named = [(item.relpath, digests[item.relpath]) for item in task.items]
            key = shard_contents(job.plan.options, named, field_values(task))
            old_shard = by_contents.get(key)
        if old_shard is not None:
            result = _reuse(old_shard, task.items, task.inputs, task.fingerprint, paths_then, sources_then,
                            skipped_then, label_of, metadata)
            if result is not None:
                reused[task.index] = result
    return Changes(added, removed, changed, reused)


def _short(hex_digest: str) -> int | None:
    return digest_prefix(bytes.fromhex(hex_digest[:16])) if hex_digest else None


def _identities_then(current: Manifest, paths: list[str], sources: list[list[int]] | None
                     ) -> dict[str, tuple[int, int, int | None]]:
    """Each source path of the current version: ``(size, mtime_ns, short hash or None)``."""
    then: dict[str, tuple[int, int, int | None]] = {}
    for i, path in enumerate(paths):
        if sources is None:
            then[path] = (-2, -2, None)  # format 1 recorded no identity: changed
        else:
            size, mtime, short = sources[i]
            then[path] = (size, mtime, short)
    for skip in current.skipped:
        then[skip.path] = (skip.size, skip.mtime_ns, None)
    return then


def _metadata_of(job: Job) -> dict[str, str]:
    if not job.index.metadata:
        return {}
    return {item.relpath: value for item, value in zip(job.index.items, job.index.metadata, strict=True)}


def _reuse(old: ShardEntry, items: Sequence[SourceItem], inputs: str, fingerprint: str,
           paths_then: list[str], sources_then: list[list[int]] | None,
           skipped_then: dict[str, SkippedFile], label_of: dict[str, int],
           metadata: dict[str, str]) -> ShardResult | None:
    """The result of planned shard ``items`` when it is the current version's shard ``old``:
    its samples and skips as they were, with today's labels, metadata and identities."""
    relpaths = tuple(paths_then[old.first:old.first + old.num_samples])
    packed = set(relpaths)
    now = {item.relpath: (item.size, item.mtime_ns) for item in items}
    skipped: list[SkippedFile] = []
    for relpath in now:
        if relpath in packed:
            continue
        skip = skipped_then.get(relpath)
        if skip is None:
            return None  # the shard does not hold what its inputs say: write it again
        skipped.append(replace(skip, size=now[relpath][0], mtime_ns=now[relpath][1]))
    if not packed <= now.keys():
        return None
    rows = sources_then[old.first:old.first + old.num_samples] if sources_then is not None else None
    shorts = [row[2] for row in rows] if rows is not None else [0] * old.num_samples
    return ShardResult(
        entry=replace(old, first=-1, inputs=inputs),
        relpaths=relpaths,
        targets=tuple(label_of[relpath] for relpath in relpaths),
        skipped=tuple(skipped),
        bytes_in=0,
        fingerprint=fingerprint,
        metadata=tuple(metadata[relpath] for relpath in relpaths) if metadata else (),
        sources=tuple((*now[relpath], short) for relpath, short in zip(relpaths, shorts, strict=True)),
    )


def describe_record(changes: Changes, written: int, bytes_written: int, *, from_version: int,
                    checksum: bool) -> dict[str, Any]:
    """What ``last_update`` in the new manifest records of this update."""
    return {"from_version": from_version, **changes.counts(), "shards_reused": len(changes.reused),
            "shards_written": written, "bytes_written": bytes_written, "checksum": checksum}

