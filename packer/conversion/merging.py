"""Finish a conversion: check every planned shard, then write the sample index and manifest.

(The module is ``merging``, not ``merge``, so that ``packer.merge`` is always the function.)

``packer convert`` does this itself at the end of a run. Array jobs (``--num-tasks N
--task-id I``) write disjoint sets of shards and no manifest; ``packer merge DST`` then runs
once, anywhere, when all of them are done: it reads the plan from DST's marker (no scan of
the source), requires every planned shard with a receipt that matches it, checks each shard
file against its receipt's SHA-256, and writes ``index.json`` last, holding DST's exclusive lease
(it refuses while a task runs, naming it). Merging a complete dataset does nothing. The
manifest is the one a single local run writes (only ``created_at`` differs).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

import numpy as np

from packer.conversion.destination.lifecycle import merge_slot
from packer.conversion.destination.state import Destination, DestinationState
from packer.conversion.outcome import check_merge_packed_something
from packer.conversion.plan import JobPlan, describe_shards, shard_name
from packer.conversion.receipts import ShardResult, receipt_path
from packer.cpus import available_cpus
from packer.digests import DigestAlgorithm
from packer.errors import MissingShardsError, NotADatasetError, OutputError, PackerError
from packer.format.backends import get_backend
from packer.format.manifest import MANIFEST_NAME, Manifest, ShardEntry, format_version_of
from packer.format.records import records_of_shards
from packer.format.sample_index import SampleIndex, write_sample_index

__all__ = ["DISTRIBUTION", "MergeResult", "build_manifest", "finished_shards", "merge", "unwritten_shards"]

#: packer's name on the Python package index (``pip install packer-shards``; the import name
#: and the command stay ``packer``: ``packer`` on PyPI is an unrelated project).
DISTRIBUTION = "packer-shards"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MergeResult:
    """What :func:`merge` found and wrote."""

    dst: str
    manifest: Manifest
    already_complete: bool = False


def build_manifest(dst: str, plan: JobPlan, results: Sequence[ShardResult], *, version: int = 1,
                   last_update: dict[str, Any] | None = None) -> Manifest:
    """Number the shards, write the sample index, then the manifest, last (atomically): the
    switch to ``version`` (1 for a conversion; ``last_update``: what an update did)."""
    shards: list[ShardEntry] = []
    relpaths: list[str] = []
    targets: list[int] = []
    metadata: list[str] = []
    sources: list[tuple[int, int, int]] = []
    for result in results:
        shards.append(replace(result.entry, first=len(relpaths)))
        relpaths.extend(result.relpaths)
        targets.extend(result.targets)
        metadata.extend(result.metadata)
        sources.extend(result.sources)
    extra: dict[str, Any] = {"shard_size": plan.options["shard_size"], "plan_fingerprint": plan.fingerprint,
                             "options": plan.options, **plan.source_extra}
    counts = [0] * len(plan.classes)
    for target in targets:
        if target >= 0:  # -1: a sample of a schema without a class label
            counts[target] += 1
    options = plan.options
    digest = plan.digest
    manifest = Manifest(
        backend=options["backend"],
        codec=options["codec"],
        codec_params=options["codec_params"],
        check=options["check"],
        max_pixels=options["max_pixels"],
        classes=plan.classes,
        class_counts=tuple(counts),
        shards=tuple(shards),
        sample_index=write_sample_index(
            dst, relpaths, targets, sources, metadata if plan.metadata_columns else None,
            records=_records(dst, options["backend"], shards, results, digest), digest=digest),
        skipped=tuple(s for r in results for s in r.skipped),
        scan=plan.scan,
        source=plan.source,
        created_by=f"packer {packer_version()}",
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        extra=extra,
        format_version=format_version_of(digest.name, has_schema="schema" in extra),
        version=version,
        last_update=last_update or {},
        digest=digest.name,
    )
    manifest.save(dst)
    return manifest


def _records(dst: str, backend: str, shards: Sequence[ShardEntry], results: Sequence[ShardResult],
             digest: DigestAlgorithm) -> np.ndarray | None:
    """The records array (:mod:`packer.format.records`), or None where the backend cannot
    locate records (a remote reader then downloads whole shards). Each shard's rows come from
    its task's result, or from the version of DST being updated (:func:`_rows_in_place`); only
    a shard found in neither (a receipt of an older packer) is read back and hashed."""
    chosen = get_backend(backend)
    if chosen.ranges is None:
        return None
    return records_of_shards(chosen, [(os.path.join(dst, s.path), s.num_samples) for s in shards],
                             known=_rows_in_place(dst, results, digest.name), workers=available_cpus(),
                             digest=digest)


def _rows_in_place(dst: str, results: Sequence[ShardResult], digest: str) -> list[np.ndarray | None]:
    """Each result's records; for a shard reused by ``packer update`` (it has none), its rows
    in the current version's records array. A shard file is named by its contents' digest,
    so a file of the same name and sample count holds the same records (a dataset keeps its
    digest algorithm across updates)."""
    known = [result.records_array() for result in results]
    if all(rows is not None for rows in known) or not os.path.isfile(os.path.join(dst, MANIFEST_NAME)):
        return known
    try:
        current = Manifest.load(dst)
        rows = SampleIndex.of(dst, current).records
    except (PackerError, OSError, KeyError, ValueError):  # no usable records: read the shards
        return known
    if current.digest != digest:  # its rows' digests are another algorithm's
        return known
    where = {shard.path: (shard.first, shard.num_samples) for shard in current.shards}
    for number, result in enumerate(results):
        first, count = where.get(result.entry.path, (0, -1))
        if known[number] is None and count == result.entry.num_samples:
            known[number] = np.array(rows[first:first + count], dtype=np.int64)
    return known


def finished_shards(dst: str, plan: JobPlan) -> tuple[dict[int, ShardResult], list[int]]:
    """Receipts of the planned shards that are finished, and the numbers of those that are not."""
    found = Destination(dst).finished(plan.shard_fingerprints)
    return found, [number for number in range(plan.num_shards) if number not in found]


def unwritten_shards(dst: str, plan: JobPlan) -> list[int]:
    """Numbers of the planned shards without a receipt in DST yet: a cheap look (no receipt is
    read; :func:`finished_shards` reads and checks them all)."""
    return [number for number, fingerprint in enumerate(plan.shard_fingerprints)
            if not os.path.exists(receipt_path(dst, fingerprint))]


def _rerun_hint(plan: JobPlan, numbers: list[int]) -> str:
    if plan.num_tasks is None:
        return "run the same convert(..., resume=True) to write them"
    tasks = sorted({number % plan.num_tasks for number in numbers})
    listed = ",".join(str(t) for t in tasks)
    return (f"run task(s) {listed} of {plan.num_tasks} again (convert_task(..., num_tasks="
            f"{plan.num_tasks}, task_id=I); a finished shard is kept), then merge() again")


def merge(dst: str | os.PathLike[str], *, verify: bool = True,
          on_shard: Callable[[str], None] | None = None) -> MergeResult:
    """Write DST's manifest once every planned shard is there; a no-op on a complete dataset.

    Args:
        dst: The destination of a conversion (typically of array tasks).
        verify: Hash every shard file and compare it with its receipt first (reads all data
            once); a shard that does not match is removed, with its receipt, so that re-running
            its task writes it again.
        on_shard: Called with each shard's name as it is checked (for a progress bar).

    Raises:
        MissingShardsError: planned shards are missing, unfinished or damaged; the message
            names them and the tasks to run again.
        EmptySourceError: the shards hold no sample (every item was skipped): no dataset is made.
        NotADatasetError: DST holds no conversion.
        DatasetBusyError: array tasks (or another merge, a convert) are writing DST; the
            message names them.
        OutputError: DST's conversion recorded no plan, or the manifest could not be written.
    """
    destination = Destination(dst)
    path = destination.path
    state = destination.state
    if state is DestinationState.COMPLETE:
        return MergeResult(path, Manifest.load(path), already_complete=True)
    if state is not DestinationState.PARTIAL:
        raise NotADatasetError(f"{path!r} holds no packer conversion to merge: give the DST of "
                               "a conversion.")
    with merge_slot(destination) as slot:
        if destination.state is DestinationState.COMPLETE:  # merged while this one waited
            return MergeResult(path, Manifest.load(path), already_complete=True)
        plan = destination.recorded_plan()
        found = _checked_shards(path, plan, verify=verify, on_shard=on_shard)
        results = [found[n] for n in range(plan.num_shards)]
        check_merge_packed_something(path, sum(len(r.relpaths) for r in results),
                                     (s.reason for r in results for s in r.skipped))
        try:
            manifest = slot.commit(lambda: build_manifest(path, plan, results))
        except OSError as err:
            raise OutputError(f"Writing the manifest of {path!r} failed: {err.strerror or err}. Fix it "
                              "(free space?), then run merge() again.") from err
    log.info("merged %d shards into %s", len(manifest.shards), path)
    return MergeResult(path, manifest)


def _checked_shards(path: str, plan: JobPlan, *, verify: bool,
                    on_shard: Callable[[str], None] | None) -> dict[int, ShardResult]:
    """Every planned shard's receipt, once each is there (and, with ``verify``, matches its file).

    Raises:
        MissingShardsError: shards are missing, unfinished or damaged (those are removed).
    """
    found, missing = finished_shards(path, plan)
    digest = plan.digest
    if missing:
        raise MissingShardsError(
            f"Cannot merge {path!r}: {len(missing)} of {plan.num_shards} shard files are missing "
            f"or unfinished: {describe_shards(plan, missing)}. Wait for running tasks to finish, or "
            f"{_rerun_hint(plan, missing)}.", missing=[shard_name(n) for n in missing])
    damaged = []
    for number, result in sorted(found.items()):
        if on_shard is not None:
            on_shard(result.entry.path)
        if verify and digest.file(os.path.join(path, result.entry.path)) != result.entry.sha256:
            damaged.append(number)
    if damaged:
        for number in damaged:
            _forget(path, plan.shard_fingerprints[number], found[number].entry.path)
        raise MissingShardsError(
            f"Cannot merge {path!r}: {len(damaged)} shard file(s) do not match the checksum their "
            f"task recorded and were removed: {', '.join(found[n].entry.path for n in damaged)} "
            f"({describe_shards(plan, damaged)}). Then "
            f"{_rerun_hint(plan, damaged)}.", missing=[found[n].entry.path for n in damaged])
    return found


def _forget(dst: str, fingerprint: str, name: str) -> None:
    """Remove a damaged shard and its receipt, so that its task writes it again."""
    for victim in (receipt_path(dst, fingerprint), os.path.join(dst, name)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(victim)


def packer_version() -> str:
    """The installed packer's version, for ``created_by``."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"
