"""``packer upgrade SRC DST``: make a dataset written by packer 0.1 (format 1) an updatable
format-2 dataset, without rewriting any shard.

``update()`` (:mod:`packer.conversion.maintenance.updating`) compares a dataset with its source through
what format 2 records and format 1 lacks: each sample's source identity (size, modification
time and a SHA-256 prefix, in ``samples/sources``) and the conversion's options.
:func:`upgrade` reads SRC once (every file, in a few threads) and checks that it still gives
exactly the dataset's samples: the same classes, files, labels and order, the same files
skipped, and, where the codec stores the source bytes (``original``), the same bytes, compared
with the stored payloads' digests. For codecs that re-encode (``jpeg``, ``pixels``) stored
bytes cannot be compared with the source: paths, classes, labels, order and skipped files are
(:attr:`UpgradeResult.bytes_compared`).
Anything that differs is named in a :class:`~packer.errors.SourceChangedError` and nothing is
written (:mod:`packer.conversion.maintenance.legacy`).

Then, under DST's lease, it writes four files: ``samples/sources-<h>.npy``,
``samples/records-<h>.npy`` (where each payload lies in its shard, for ranged reads from a URL),
``versions/00001.json`` and ``index.json``, atomically and last: the switch. Format 2 names
data files by their contents, but nothing requires it, since the manifest names every file:
so, on purpose, the shard files and 0.1's ``samples/targets.npy``, ``path_offsets.npy`` and
``paths.bin`` keep their names and bytes, and the new manifest names them. Nothing a reader of
the 0.1 dataset has open is renamed or becomes garbage for ``collect_garbage()``. Killed at
any point, DST stays the 0.1 dataset it was (the files written before the switch are named by
nothing); running ``upgrade`` again finishes it.

A 0.1 shard was cut at fixed byte counts and is named by its number, so no shard of a fresh
conversion is ever that file: its manifest entry records no inputs, and the first ``update()``
after an upgrade writes every shard in format 2's layout (as a new version, while readers keep
reading version 1); later updates write only what changed. A shard that a
0.2 packer wrote (named by its contents: a format-1 manifest over 0.2 files) is what a fresh
conversion writes, and records its inputs, so that updates keep it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

import numpy as np

from packer.conversion.destination.lock import dataset_lock
from packer.conversion.destination.resume import (
    item_identities,
    plan_fingerprint,
    shard_contents,
    shard_inputs,
)
from packer.conversion.destination.state import Destination, DestinationState
from packer.conversion.maintenance.legacy import (
    SourceRead,
    content_differences,
    legacy_options,
    read_source,
    refuse,
    stored_records,
    structural_differences,
)
from packer.conversion.merging import packer_version
from packer.conversion.options import ConversionOptions
from packer.conversion.plan import planned_item_sizes, scan_info
from packer.conversion.sharding import plan_shards
from packer.cpus import available_cpus
from packer.errors import NotADatasetError, OutputError
from packer.format.backends import Backend, get_backend
from packer.format.manifest import FORMAT_VERSION, MANIFEST_NAME, Manifest, ShardEntry, SkippedFile
from packer.format.sample_index import SampleIndex, write_index_file
from packer.format.shardset import shard_file_name
from packer.progressbar import ProgressBar
from packer.source.base import ItemReader, Source, SourceIndex
from packer.source.registry import open_source

__all__ = ["UpgradeResult", "upgrade"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UpgradeResult:
    """What :func:`upgrade` found and did."""

    dst: str
    #: DST's manifest now: format 2, version 1 (the one it had, when it was already current).
    manifest: Manifest
    #: Samples checked against SRC (0 when DST was already current).
    samples_compared: int
    #: Whether stored bytes were compared with SRC's (codecs that store them, ``original``);
    #: otherwise paths, classes, labels, order and skipped files were.
    bytes_compared: bool
    #: Shard files the new manifest names as they were (all of DST's: none is rewritten).
    shards_kept: int
    #: Of those, the shards a later :func:`~packer.conversion.maintenance.updating.update` can keep (ones a
    #: packer 0.2 wrote; 0.1's shards are rewritten by the first update).
    shards_reusable: int
    seconds: float
    #: DST was written by packer 0.2 or later already: nothing was done.
    already_current: bool = False


def upgrade(src: str | os.PathLike[str], dst: str | os.PathLike[str], *,
            is_valid_file: Callable[[str], bool] | None = None, workers: int | None = None,
            progress: bool = False) -> UpgradeResult:
    """Make DST, a dataset of packer 0.1 (format 1), a format-2 dataset that
    :func:`~packer.conversion.maintenance.updating.update` works on.

    Reads SRC once and checks that it gives exactly DST's samples; then records each source
    file's identity and writes version 1's manifest, rewriting and renaming no shard (see the
    module docstring). On a dataset of packer 0.2 or later it does nothing and says so.

    Args:
        src: The source DST was converted from (or a copy of it), unchanged since.
        dst: A complete dataset written by packer 0.1.
        is_valid_file: The filter DST was converted with, if it was (it cannot be recorded).
        workers: Threads reading SRC and DST (default: the usable CPUs).
        progress: Show a progress bar.

    Raises:
        NotADatasetError, IncompleteDatasetError: DST is not a complete dataset.
        SourceChangedError: SRC does not give DST's samples; the message names those that
            differ, and nothing was written.
        SourceError: SRC cannot be scanned or read.
        OutputError: DST cannot be upgraded (an ``is_valid_file`` filter is needed; it changed
            meanwhile) or written.
        DatasetBusyError: another process holds DST's lease.
    """
    started = time.perf_counter()
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    destination = Destination(dst)
    path = destination.path
    if destination.state is not DestinationState.COMPLETE:
        Manifest.load(path)  # the precise error for an incomplete or missing DST
        raise NotADatasetError(f"{path!r} is not a packer dataset: give the DST of a conversion.")
    manifest_text = _manifest_text(path)
    current = Manifest.from_json(manifest_text, source=os.path.join(path, MANIFEST_NAME))
    if current.format_version >= FORMAT_VERSION:
        return _already_current(path, current, started)
    options = legacy_options(current, path, is_valid_file=is_valid_file)
    with open_source(src, options.source_options) as source:
        upgraded, compared = _compare_and_describe(source, path, current, options,
                                                   workers=workers or available_cpus(), progress=progress)
        with dataset_lock(path, "upgrade") as lease:
            if _manifest_text(path) != manifest_text:  # another upgrade (or a conversion) got there first
                now = Manifest.load(path)
                if now.format_version >= FORMAT_VERSION:
                    return _already_current(path, now, started)
                raise OutputError(f"{path!r} changed while upgrade() read it: run upgrade(src, dst) again.")
            manifest = _write(path, upgraded, compared, lease.check)
    reusable = sum(1 for shard in manifest.shards if shard.inputs)
    log.info("upgraded %s to format %d: %d samples compared, %d shards kept (%d reusable)", path,
             FORMAT_VERSION, manifest.num_samples, len(manifest.shards), reusable)
    return UpgradeResult(path, manifest, manifest.num_samples, compared.bytes_compared, len(manifest.shards),
                         reusable, time.perf_counter() - started)


def _manifest_text(path: str) -> str:
    with open(os.path.join(path, MANIFEST_NAME), encoding="utf-8") as handle:
        return handle.read()


def _already_current(path: str, manifest: Manifest, started: float) -> UpgradeResult:
    return UpgradeResult(path, manifest, 0, False, len(manifest.shards),
                         sum(1 for shard in manifest.shards if shard.inputs),
                         time.perf_counter() - started, already_current=True)


@dataclass(frozen=True)
class _Compared:
    """What the comparison found for the files to write: each packed sample's source identity
    and, where the backend can locate records, the records array."""

    sources: np.ndarray
    records: np.ndarray | None
    bytes_compared: bool


def _compare_and_describe(source: Source, path: str, current: Manifest, options: ConversionOptions, *,
                          workers: int, progress: bool) -> tuple[Manifest, _Compared]:
    """Compare DST with SRC (raising what differs) and return the format-2 manifest to write
    (its ``sources`` and ``records`` entries still to come) with the arrays for them."""
    index = source.scan()
    reader = source.reader()
    options = options.for_source(source.kind)
    then = SampleIndex.of(path, current)
    paths = [then.path(i) for i in range(current.num_samples)]
    targets = then.targets.tolist()
    found = structural_differences(current, paths, targets, index)
    if found:
        raise refuse(source.location, path, found)
    skipped = {skip.path for skip in current.skipped}
    backend = get_backend(current.backend)
    bytes_compared = options.stored_as.keeps_source_bytes
    with ProgressBar(total=len(index.items) + current.num_samples, unit="img", dynamic_ncols=True,
              desc=f"upgrading {os.path.basename(path) or path}", disable=None if progress else True) as bar:
        reads = read_source(index, reader, skipped, options, workers=workers, advance=bar.update)
        records = stored_records(path, backend, current.shards, workers=workers, advance=bar.update,
                                 payloads=bytes_compared)
    stored = records[:, 2] if records is not None and bytes_compared else None
    found = content_differences(index, reads, skipped, stored)
    if found:
        raise refuse(source.location, path, found)
    recorded = options.recorded()
    pairs = list(zip(index.items, reads, strict=True))
    sources = np.array([(item.size, item.mtime_ns, read.short) for item, read in pairs
                        if item.relpath not in skipped], dtype=np.int64).reshape(current.num_samples, 3)
    skips = tuple(SkippedFile(item.relpath, read.unpackable.reason, read.unpackable.detail, item.size,
                              item.mtime_ns)
                  for item, read in pairs if read.unpackable is not None)
    upgraded = Manifest(
        backend=current.backend, codec=current.codec, codec_params=current.codec_params, check=current.check,
        max_pixels=current.max_pixels, classes=current.classes, class_counts=current.class_counts,
        shards=_shard_entries(current, backend, index, reader, reads, skipped, options, recorded),
        sample_index={key: entry for key, entry in current.sample_index.items()
                      if key not in ("sources", "records")},
        skipped=skips, scan=scan_info(index, source.scan_filter()), source=source.location,
        created_by=f"packer {packer_version()}",
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        extra=_extra(source, index, recorded, current, bytes_compared=bytes_compared),
        version=current.version,
    )
    return upgraded, _Compared(sources, None if backend.ranges is None else records, bytes_compared)


def _shard_entries(current: Manifest, backend: Backend, index: SourceIndex, reader: ItemReader,
                   reads: Sequence[SourceRead], skipped: set[str], options: ConversionOptions,
                   recorded: dict[str, Any]) -> tuple[ShardEntry, ...]:
    """DST's shards as the format-2 manifest lists them: what they were, with the inputs that
    let ``update`` keep them for those a packer 0.2 wrote where this plan puts them (named by
    content, holding exactly a planned shard's samples), and no inputs for the others."""
    named = [shard.path == shard_file_name(shard.sha256, backend.suffix) for shard in current.shards]
    planned: dict[tuple[int, int], tuple[str, str]] = {}
    if any(named):
        items = index.items
        cuts = plan_shards(planned_item_sizes(index, reader, options.stored_as),
                           [item.relpath for item in items], options.shard_bytes)
        first = 0
        for cut in cuts:
            chunk = items[cut.start:cut.stop]
            count = sum(1 for item in chunk if item.relpath not in skipped)
            digests = [(item.relpath, reads[cut.start + i].digest.hex()) for i, item in enumerate(chunk)]
            planned[(first, count)] = (shard_inputs(recorded, item_identities(chunk, labels=False)),
                                       shard_contents(recorded, digests))
            first += count
    shards = []
    for shard, by_content in zip(current.shards, named, strict=True):
        inputs, contents = planned.get((shard.first, shard.num_samples), ("", ""))
        if not by_content or shard.num_samples == 0:
            inputs = contents = ""
        shards.append(replace(shard, inputs=inputs, contents=contents))
    return tuple(shards)


def _extra(source: Source, index: SourceIndex, recorded: dict[str, Any], current: Manifest, *,
           bytes_compared: bool) -> dict[str, Any]:
    """The manifest's ``extra``, as a conversion of SRC records it, and what was upgraded."""
    report = {"notes": list(index.report.notes)} if index.report.notes else {}
    return {
        "shard_size": recorded["shard_size"],
        "plan_fingerprint": plan_fingerprint(source.location, recorded, index, index.metadata),
        "options": recorded,
        **source.manifest_extra(),
        "source": {"kind": source.kind, "location": source.location, "params": source.params(),
                   "report": report},
        "upgraded": {"from_format_version": current.format_version, "created_by": current.created_by,
                     "created_at": current.created_at, "bytes_compared": bytes_compared},
    }


def _write(path: str, upgraded: Manifest, compared: _Compared, check_lease: Callable[[], None]) -> Manifest:
    """Write the sources and records files, then the manifest: ``versions/<n>.json`` and, last,
    ``index.json`` (the switch), each atomically."""
    entries = dict(upgraded.sample_index)
    try:
        entries["sources"] = write_index_file(path, "sources", compared.sources)
        if compared.records is not None:
            entries["records"] = write_index_file(path, "records", compared.records)
        manifest = replace(upgraded, sample_index=entries)
        check_lease()
        manifest.save(path)
    except OSError as err:
        raise OutputError(f"Writing the format-{FORMAT_VERSION} manifest of {path!r} failed: "
                          f"{err.strerror or err}. DST is still the dataset it was; fix it (free "
                          "space? permissions?), then run upgrade(src, dst) again.") from err
    return manifest
