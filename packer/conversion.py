"""Convert an ImageFolder tree into a packed dataset: scan, plan, write shards in parallel, commit.

(The module is ``conversion``, not ``convert``, so that ``packer.convert`` is always the function.)

The order of events is the crash-safety contract: DST is checked (nothing touched), SRC is
scanned and planned, DST is marked "in progress" with the plan's fingerprint, worker processes
write whole shards (each under ``DST/.tmp``, fsynced, hashed, renamed into place, then given a
receipt), the sample index is written, and ``index.json`` is written last, atomically. A run
killed at any instant leaves a DST that readers reject as incomplete and that ``resume``
finishes, keeping every finished shard. Every file with an image name is packed or listed in
``skipped`` with a reason. The output does not depend on the number of workers.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

from tqdm import tqdm

from packer.backends import get_backend
from packer.codecs import CHECK_LEVELS, DEFAULT_MAX_PIXELS, Codec, OriginalCodec, get_codec
from packer.destination import (
    check_destination,
    clear_destination,
    discard_staging,
    finish_destination,
    read_marker,
    start_destination,
)
from packer.errors import OutputError
from packer.imagecheck import image_dimensions
from packer.imagefolder import IMG_EXTENSIONS, FolderIndex, scan_imagefolder
from packer.manifest import Manifest, ScanInfo, ShardEntry
from packer.planning import plan_shards
from packer.resume import check_resumable, keep_finished_shards, plan_fingerprint, shard_fingerprint
from packer.sample_index import write_sample_index
from packer.scheduling import Collector, make_tasks
from packer.shardwork import ShardResult, ShardTask
from packer.sizes import parse_size
from packer.workers import run_shard_tasks

__all__ = ["DEFAULT_SHARD_SIZE", "ConversionResult", "convert", "default_workers",
           "planned_item_sizes", "shard_name"]

log = logging.getLogger(__name__)

DEFAULT_SHARD_SIZE = 1 << 30


@dataclass(frozen=True)
class ConversionResult:
    """What a conversion did: the manifest it wrote and how long and how much it took."""

    dst: str
    manifest: Manifest
    found: int
    seconds: float
    bytes_in: int
    resumed_shards: int = 0
    already_complete: bool = False

    @property
    def images_per_second(self) -> float:
        """Samples packed per second of wall time."""
        return self.manifest.num_samples / self.seconds if self.seconds > 0 else 0.0


def shard_name(index: int, suffix: str) -> str:
    """File name of shard ``index``: ``shard-00000.lmdb``."""
    return f"shard-{index:05d}{suffix}"


def default_workers() -> int:
    """The CPUs this process may use (affinity and cgroup-pinned sets respected)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class _ThreadlessTqdm(tqdm):  # type: ignore[misc]
    """tqdm without its monitor thread: a thread would make workers start by (slow) spawn
    instead of fork (see packer.workers); this bar does not need the monitor."""

    monitor_interval = 0


class _Bar:
    """One progress bar for the run: it ends at the number of samples packed."""

    def __init__(self, total: int, *, enabled: bool, desc: str) -> None:
        self._bar = _ThreadlessTqdm(total=total, unit="img", disable=None if enabled else True,
                                    desc=desc, dynamic_ncols=True)

    def kept(self, result: ShardResult) -> None:
        self._bar.total -= len(result.skipped)
        self._bar.update(len(result.relpaths))

    def event(self, kind: str, detail: str) -> None:
        packed, skipped = (int(x) for x in detail.split())
        if kind == "progress":
            self._bar.total -= skipped
            self._bar.update(packed)
        elif kind == "retry":  # a task is redone: take back what it had counted
            self._bar.total += skipped
            self._bar.update(-packed)

    def close(self) -> None:
        self._bar.close()


def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    to: str,
    shard_size: int | str = DEFAULT_SHARD_SIZE,
    codec: str = "original",
    codec_options: Mapping[str, Any] | None = None,
    check: str = "full",
    max_pixels: int = DEFAULT_MAX_PIXELS,
    strict: bool = False,
    overwrite: bool = False,
    resume: bool = False,
    workers: int | None = None,
    include_hidden: bool = False,
    allow_empty: bool = False,
    is_valid_file: Callable[[str], bool] | None = None,
    progress: bool = False,
) -> ConversionResult:
    """Pack the ImageFolder tree ``src`` into shards of backend ``to`` under ``dst``.

    Args:
        src: Root of the tree, ``src/<class>/**/<image>``.
        dst: New or empty directory (or an earlier packer dataset, with ``overwrite``).
        to: Backend name, ``"lmdb"`` or ``"hdf5"``.
        shard_size: Planned bytes per shard, as a number or text such as ``"512MB"``.
        codec: How images are stored; ``"original"`` keeps the source bytes untouched,
            ``"jpeg"`` re-encodes, ``"pixels"`` stores decoded RGB (see packer.reencode).
        codec_options: The codec's options: ``{"quality": 90, "resize": 256}`` for ``jpeg``,
            ``{"resize": 256}`` for ``pixels`` (short side in pixels; never enlarged).
        check: ``"full"`` decodes every image once, ``"header"`` only opens it, ``"none"``
            trusts the files.
        max_pixels: Images with more pixels are skipped as ``decompression_bomb``.
        strict: Stop at the first file that cannot be packed instead of skipping it (with
            several workers, the first one any worker meets).
        overwrite: Replace an existing packer dataset or interrupted conversion at ``dst``.
        resume: Finish an interrupted conversion of the same source with the same options,
            keeping its finished shards; on a complete one, do nothing; on an empty ``dst``,
            simply start.
        workers: Worker processes writing shards (default: the CPUs this process may use).
            The output is byte-identical whatever the number.
        include_hidden: Pack names starting with ``.`` too (ImageFolder does; packer does not).
        allow_empty: Accept class folders without images, as ImageFolder's ``allow_empty``.
        is_valid_file: Replaces the extension check; receives each file's full path.
        progress: Show a tqdm bar on stderr when it is a terminal.

    Raises:
        SourceError: SRC is missing, has no classes, has an empty class, or (``strict``) holds
            a bad file (:class:`BadImageError`).
        OutputExistsError: DST is not empty and neither ``overwrite`` nor ``resume`` applies.
        ResumeError: ``resume`` over a run of another source tree or other options.
        OutputError: DST cannot be used (a file, inside SRC, a foreign directory, read-only,
            disk full).
        ConversionError: a worker was killed (out of memory?) or failed;
            :class:`ConversionInterrupted` on Ctrl-C. Finished shards stay for ``resume``.
        UnknownNameError: ``to`` or ``codec`` is not registered.
    """
    started = time.perf_counter()
    backend = get_backend(to)
    chosen_codec = get_codec(codec, codec_options)
    if check not in CHECK_LEVELS:
        raise ValueError(f"check must be one of {', '.join(CHECK_LEVELS)}, not {check!r}")
    if max_pixels <= 0:
        raise ValueError(f"max_pixels must be positive, not {max_pixels}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
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
    if resume and state == "complete":
        return _already_complete(dst_path, fingerprint, len(index.items), started)
    if resume and state == "partial":
        check_resumable(dst_path, read_marker(dst_path), fingerprint, src_path, options,
                        len(index.items))
    plans = plan_shards(planned_item_sizes(index, chosen_codec), planned_size)
    names = [shard_name(plan.index, backend.suffix) for plan in plans]
    items = [tuple((it.relpath, it.label, it.size) for it in index.items[p.start:p.stop]) for p in plans]
    fingerprints = [shard_fingerprint(p.index, options, items[p.index]) for p in plans]
    try:
        if state in ("complete", "partial") and not resume:
            clear_destination(dst_path)
        staging = start_destination(dst_path, {"source": src_path, "options": options,
                                               "fingerprint": fingerprint,
                                               "items": len(index.items), "shards": len(plans)})
        kept = keep_finished_shards(dst_path, names, fingerprints) if resume else {}
    except OSError as err:
        raise OutputError(f"Cannot write to {dst_path!r}: {err.strerror or err}. Choose a writable "
                          "destination, or fix its permissions and run again.") from err
    shard_tasks = [ShardTask(p.index, names[p.index], src_path, dst_path, staging, backend.name,
                             chosen_codec.name, check, max_pixels, strict, p.planned_bytes,
                             items[p.index], fingerprints[p.index], chosen_codec.params())
                   for p in plans if p.index not in kept]
    workers = workers or default_workers()
    tasks = make_tasks(shard_tasks, workers)
    collect = Collector(tasks)
    bar = _Bar(len(index.items), enabled=progress,
               desc=f"packing {os.path.basename(src_path) or src_path}")
    try:
        for result in kept.values():
            bar.kept(result)
        run_shard_tasks(tasks, workers=workers, on_event=bar.event, on_result=collect)
    except BaseException:
        collect.abort()
        discard_staging(dst_path)
        raise
    finally:
        bar.close()
    results = {**kept, **collect.shards}
    try:
        manifest = _write_manifest(dst_path, src_path, index,
                                   [results[i] for i in range(len(plans))], options, fingerprint,
                                   is_valid_file)
        finish_destination(dst_path)
    except OSError as err:
        raise OutputError(f"Writing the manifest of {dst_path!r} failed: {err.strerror or err}. "
                          "Fix it (free space?), then run the same command with --resume.") from err
    seconds = time.perf_counter() - started
    log.info("packed %d samples into %s in %.1f s", manifest.num_samples, dst_path, seconds)
    bytes_in = sum(r.bytes_in for i, r in results.items() if i not in kept)
    return ConversionResult(dst_path, manifest, len(index.items), seconds, bytes_in,
                            resumed_shards=len(kept))


def planned_item_sizes(index: FolderIndex, codec: Codec) -> list[int]:
    """What each source file will take in a shard, for planning: its size for ``original``;
    for codecs that decode, an estimate from the image's header (read, not decoded)."""
    if isinstance(codec, OriginalCodec):
        return [item.size for item in index.items]
    return [codec.planned_bytes(image_dimensions(index.path_of(item)), max(item.size, 0))
            for item in index.items]


def _already_complete(dst: str, fingerprint: str, found: int, started: float) -> ConversionResult:
    manifest = Manifest.load(dst)
    if manifest.extra.get("plan_fingerprint") != fingerprint:
        raise OutputError(f"{dst!r} is a complete dataset of another source tree or other options: "
                          "nothing to resume. Choose a new directory, or --overwrite it.")
    return ConversionResult(dst, manifest, found, time.perf_counter() - started, 0,
                            resumed_shards=len(manifest.shards), already_complete=True)


def _write_manifest(dst: str, src: str, index: FolderIndex, results: list[ShardResult],
                    options: dict[str, Any], fingerprint: str,
                    is_valid_file: Callable[[str], bool] | None) -> Manifest:
    """Number the shards, write the sample index, then the manifest, last."""
    shards: list[ShardEntry] = []
    relpaths: list[str] = []
    targets: list[int] = []
    for result in results:
        shards.append(replace(result.entry, first=len(relpaths)))
        relpaths.extend(result.relpaths)
        targets.extend(result.targets)
    counts = [0] * len(index.classes)
    for target in targets:
        counts[target] += 1
    manifest = Manifest(
        backend=options["backend"],
        codec=options["codec"],
        codec_params=options["codec_params"],
        check=options["check"],
        max_pixels=options["max_pixels"],
        classes=index.classes,
        class_counts=tuple(counts),
        shards=tuple(shards),
        sample_index=write_sample_index(dst, relpaths, targets),
        skipped=tuple(s for r in results for s in r.skipped),
        scan=_scan_info(index, is_valid_file),
        source=src,
        created_by=f"packer {_packer_version()}",
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        extra={"shard_size": options["shard_size"], "plan_fingerprint": fingerprint},
    )
    manifest.save(dst)
    return manifest


def _scan_info(index: FolderIndex, is_valid_file: Callable[[str], bool] | None) -> ScanInfo:
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


def _packer_version() -> str:
    try:
        return metadata.version("packer")
    except metadata.PackageNotFoundError:
        return "unknown"
