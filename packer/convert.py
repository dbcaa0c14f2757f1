"""Convert an ImageFolder tree into a packed dataset: scan, plan, write shards, commit.

The order of events is the crash-safety contract: DST is checked (nothing touched), SRC is
scanned and planned, DST is marked "in progress", each shard is written under ``DST/.tmp``,
fsynced, hashed and renamed into place, the sample index is written, and ``index.json`` is
written last, atomically. A run killed at any instant leaves a DST that readers reject as
incomplete. Every file with an image name is packed or listed in ``skipped`` with a reason.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

from tqdm import tqdm

from packer.backends import get_backend
from packer.codecs import CHECK_LEVELS, DEFAULT_MAX_PIXELS, Codec, get_codec
from packer.destination import (
    check_destination,
    clear_destination,
    finish_destination,
    start_destination,
)
from packer.durable import fsync_dir, sha256_file
from packer.errors import BadImageError, SourceError
from packer.imagefolder import IMG_EXTENSIONS, FolderIndex, scan_imagefolder
from packer.manifest import Manifest, ScanInfo, ShardEntry, SkippedFile
from packer.planning import ShardPlan, plan_shards
from packer.sample_index import write_sample_index
from packer.sizes import parse_size
from packer.sourcefile import UnpackableFile, read_source

__all__ = ["DEFAULT_SHARD_SIZE", "ConversionResult", "convert", "shard_name"]

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

    @property
    def images_per_second(self) -> float:
        """Samples packed per second of wall time."""
        return self.manifest.num_samples / self.seconds if self.seconds > 0 else 0.0


def shard_name(index: int, suffix: str) -> str:
    """File name of shard ``index``: ``shard-00000.lmdb``."""
    return f"shard-{index:05d}{suffix}"


@dataclass
class _Progress:
    """What the shard writer accumulates across shards."""

    relpaths: list[str]
    targets: list[int]
    skipped: list[SkippedFile]
    bytes_in: int = 0


def _pack_one(index: FolderIndex, position: int, codec: Codec, *, check: str, max_pixels: int,
              strict: bool, state: _Progress) -> bytes | None:
    """Read and encode one source file; on a bad file record it (or raise under strict)."""
    item = index.items[position]
    path = index.path_of(item)
    try:
        data = read_source(path)
        payload = codec.encode(data, check=check, max_pixels=max_pixels)
    except UnpackableFile as bad:
        if strict:
            raise BadImageError(f"{path!r} cannot be packed: {bad.reason} ({bad.detail}). Fix or "
                                "remove the file, or convert without --strict to skip and list it.",
                                path=item.relpath, reason=bad.reason) from None
        log.info("skipping %s: %s", item.relpath, bad)
        state.skipped.append(SkippedFile(item.relpath, bad.reason, bad.detail))
        return None
    except OSError as err:
        raise SourceError(f"Reading {path!r} failed: {err}. Fix the storage or the file and "
                          "convert again.") from err
    state.bytes_in += len(data)
    state.relpaths.append(item.relpath)
    state.targets.append(item.label)
    return payload


def _write_shard(plan: ShardPlan, index: FolderIndex, codec: Codec, *, backend_name: str,
                 dst: str, staging: str, check: str, max_pixels: int, strict: bool,
                 state: _Progress, bar: tqdm) -> ShardEntry:
    """Write one planned shard under ``staging``, then fsync, hash and rename it into ``dst``."""
    backend = get_backend(backend_name)
    name = shard_name(plan.index, backend.suffix)
    tmp_path = os.path.join(staging, name)
    first = len(state.relpaths)
    with backend.writer(tmp_path, capacity=max(plan.planned_bytes, 1)) as writer:
        for position in range(plan.start, plan.stop):
            payload = _pack_one(index, position, codec, check=check, max_pixels=max_pixels,
                                strict=strict, state=state)
            if payload is not None:
                writer.write(payload)
            bar.update(1)
    checksum = sha256_file(tmp_path)
    size = os.path.getsize(tmp_path)
    os.replace(tmp_path, os.path.join(dst, name))
    fsync_dir(dst)
    return ShardEntry(name, first, len(state.relpaths) - first, size, checksum)


def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    to: str,
    shard_size: int | str = DEFAULT_SHARD_SIZE,
    codec: str = "original",
    check: str = "full",
    max_pixels: int = DEFAULT_MAX_PIXELS,
    strict: bool = False,
    overwrite: bool = False,
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
        codec: How images are stored; ``"original"`` keeps the source bytes untouched.
        check: ``"full"`` decodes every image once, ``"header"`` only opens it, ``"none"``
            trusts the files.
        max_pixels: Images with more pixels are skipped as ``decompression_bomb``.
        strict: Stop at the first file that cannot be packed instead of skipping it.
        overwrite: Replace an existing packer dataset at ``dst``.
        include_hidden: Pack names starting with ``.`` too (ImageFolder does; packer does not).
        allow_empty: Accept class folders without images, as ImageFolder's ``allow_empty``.
        is_valid_file: Replaces the extension check; receives each file's full path.
        progress: Show a tqdm bar on stderr when it is a terminal.

    Raises:
        SourceError: SRC is missing, has no classes, has an empty class, or (``strict``) holds
            a bad file (:class:`BadImageError`).
        OutputExistsError: DST is not empty and ``overwrite`` is off.
        OutputError: DST cannot be used (a file, inside SRC, or a foreign directory).
        UnknownNameError: ``to`` or ``codec`` is not registered.
    """
    started = time.perf_counter()
    backend = get_backend(to)
    chosen_codec = get_codec(codec)
    if check not in CHECK_LEVELS:
        raise ValueError(f"check must be one of {', '.join(CHECK_LEVELS)}, not {check!r}")
    if max_pixels <= 0:
        raise ValueError(f"max_pixels must be positive, not {max_pixels}")
    planned_size = parse_size(shard_size)
    src_path, dst_path = os.path.abspath(os.fspath(src)), os.path.abspath(os.fspath(dst))
    check_destination(dst_path, src_path, overwrite=overwrite)
    index = scan_imagefolder(src_path, is_valid_file=is_valid_file, allow_empty=allow_empty,
                             include_hidden=include_hidden)
    plans = plan_shards([item.size for item in index.items], planned_size)
    if os.path.isdir(dst_path) and os.listdir(dst_path):
        clear_destination(dst_path)
    options: dict[str, Any] = {"backend": backend.name, "codec": chosen_codec.name,
                               "check": check, "max_pixels": max_pixels, "shard_size": planned_size}
    staging = start_destination(dst_path, {"source": src_path, "options": options,
                                           "items": len(index.items), "shards": len(plans)})
    state = _Progress([], [], [])
    shards: list[ShardEntry] = []
    with tqdm(total=len(index.items), unit="img", disable=None if progress else True,
              desc=f"packing {os.path.basename(src_path) or src_path}", dynamic_ncols=True) as bar:
        for plan in plans:
            shards.append(_write_shard(plan, index, chosen_codec, backend_name=backend.name,
                                       dst=dst_path, staging=staging, check=check,
                                       max_pixels=max_pixels, strict=strict, state=state, bar=bar))
    sample_files = write_sample_index(dst_path, state.relpaths, state.targets)
    counts = [0] * len(index.classes)
    for target in state.targets:
        counts[target] += 1
    manifest = Manifest(
        backend=backend.name,
        codec=chosen_codec.name,
        codec_params=chosen_codec.params(),
        check=check,
        max_pixels=max_pixels,
        classes=index.classes,
        class_counts=tuple(counts),
        shards=tuple(shards),
        sample_index=sample_files,
        skipped=tuple(state.skipped),
        scan=_scan_info(index, is_valid_file),
        source=src_path,
        created_by=f"packer {_packer_version()}",
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        extra={"shard_size": planned_size},
    )
    manifest.save(dst_path)
    finish_destination(dst_path)
    seconds = time.perf_counter() - started
    log.info("packed %d samples into %s in %.1f s", manifest.num_samples, dst_path, seconds)
    return ConversionResult(dst_path, manifest, len(index.items), seconds, state.bytes_in)


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
