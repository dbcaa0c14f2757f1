"""Plan a conversion without doing it: what ``packer convert ... --dry-run`` shows.

:func:`plan_conversion` scans SRC and cuts the shard plan exactly as :func:`packer.conversion.run.convert`
does, then stops: nothing is read from an image, nothing is written, and DST is not needed. The
resulting :class:`ConversionPlan` holds the class map, per-class counts, the extension mix, what
the scan ignored, empty classes, the shards and an estimate of the output size;
:func:`packer.cli.formatting.format_plan` renders it for people, :meth:`ConversionPlan.to_dict` for ``--json``.

The output size is an estimate from the source sizes (``original`` codec only): it assumes every
file is packed, so files skipped as unreadable make the real output smaller. Its parts are the
shards (payload plus the backend's overhead, modelled below), the sample index and the manifest.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packer.format.backends import get_backend
from packer.format.codecs import get_codec
from packer.conversion.run import DEFAULT_SHARD_SIZE
from packer.source.imagefolder import ScanReport, scan_imagefolder
from packer.conversion.plan import planned_item_sizes, shard_name
from packer.conversion.sharding import plan_shards
from packer.sizes import parse_size

__all__ = ["ConversionPlan", "PlannedShard", "plan_conversion"]

# LMDB as py-lmdb's bundled liblmdb lays out one append-only shard: 4 KiB pages, 2 meta pages; a
# leaf node is an 8-byte header + 8-byte key + the value (even-aligned, plus a 2-byte slot); a
# node over _LMDB_NODE_MAX moves its value to whole overflow pages and keeps an 8-byte page number.
_LMDB_PAGE = 4096
_LMDB_PAGE_HEADER = 16
_LMDB_NODE = 8 + 8
_LMDB_NODE_MAX = (((_LMDB_PAGE - _LMDB_PAGE_HEADER) // 2) & -2) - 2
_LMDB_BRANCH_FANOUT = (_LMDB_PAGE - _LMDB_PAGE_HEADER) // (_LMDB_NODE + 2)
_LMDB_BATCH_RECORDS = 1000  # the writer commits every 1000 records; each later commit copies a path
# HDF5 (h5py defaults): a 2 KiB metadata block, the int64 offsets array, the contiguous blob.
_HDF5_FIXED = 2048
# Sample index: two .npy files (128-byte headers, int64 targets and n+1 offsets) and the paths.
_NPY_HEADER = 128
# index.json: a fixed part, plus per class, per shard and per listed scan path (measured).
_MANIFEST_FIXED, _MANIFEST_PER_CLASS, _MANIFEST_PER_SHARD, _MANIFEST_PER_PATH = 1400, 16, 200, 8


def _lmdb_shard_bytes(sizes: Sequence[int]) -> int:
    """Estimated file size of one LMDB shard holding values of ``sizes`` bytes."""
    pages, leaves, used = 2, 0, _LMDB_PAGE
    for size in sizes:
        node = _LMDB_NODE + size
        if node > _LMDB_NODE_MAX:
            pages += (_LMDB_PAGE_HEADER - 1 + size) // _LMDB_PAGE + 1
            node = _LMDB_NODE + 8
        node += (node & 1) + 2
        if used + node > _LMDB_PAGE - _LMDB_PAGE_HEADER:
            leaves, used = leaves + 1, 0
        used += node
    depth, level = 1, leaves
    while level > 1:
        level = -(-level // _LMDB_BRANCH_FANOUT)
        pages, depth = pages + level, depth + 1
    extra_commits = max(0, -(-len(sizes) // _LMDB_BATCH_RECORDS) - 1)
    return (pages + leaves + extra_commits * (depth + 1)) * _LMDB_PAGE


def _shard_bytes(backend: str, sizes: Sequence[int]) -> int | None:
    if backend == "lmdb":
        return _lmdb_shard_bytes(sizes)
    if backend == "hdf5":
        return _HDF5_FIXED + 8 * (len(sizes) + 1) + sum(sizes)
    return None


@dataclass(frozen=True, slots=True)
class PlannedShard:
    """One shard the conversion would write: source items ``start`` to ``stop`` (exclusive)."""

    index: int
    name: str
    start: int
    stop: int
    planned_bytes: int
    estimated_bytes: int | None
    first_path: str
    last_path: str

    @property
    def num_images(self) -> int:
        """Source images planned into this shard."""
        return self.stop - self.start


@dataclass(frozen=True)
class ConversionPlan:
    """Everything a conversion of ``src`` would do, found without writing anything.

    ``class_counts`` is aligned with ``classes``; ``extensions`` maps each lower-cased suffix
    (``""`` for none) to its count; ``source_bytes`` counts unreadable sizes as 0, and
    ``unknown_sizes`` says how many there were. ``estimated_output_bytes`` is ``None`` when the
    codec re-encodes (the size is then unknown before encoding).
    """

    src: str
    backend: str
    codec: str
    shard_size: int
    classes: tuple[str, ...]
    class_counts: tuple[int, ...]
    empty_classes: tuple[str, ...]
    would_fail_empty: bool
    include_hidden: bool
    extensions: Counter[str] = field(hash=False)
    num_images: int
    source_bytes: int
    unknown_sizes: int
    report: ScanReport
    shards: tuple[PlannedShard, ...]
    estimated_output_bytes: int | None

    @property
    def class_to_idx(self) -> dict[str, int]:
        """Class name to label, as torchvision's ``ImageFolder.class_to_idx``."""
        return {name: i for i, name in enumerate(self.classes)}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (what ``--dry-run --json`` would print)."""
        report = self.report
        return {
            "dry_run": True, "src": self.src, "backend": self.backend, "codec": self.codec,
            "shard_size": self.shard_size, "num_images": self.num_images,
            "num_classes": len(self.classes), "classes": list(self.classes),
            "class_counts": dict(zip(self.classes, self.class_counts, strict=True)),
            "empty_classes": list(self.empty_classes), "would_fail_empty": self.would_fail_empty,
            "include_hidden": self.include_hidden, "extensions": dict(sorted(self.extensions.items())),
            "source_bytes": self.source_bytes, "unknown_sizes": self.unknown_sizes,
            "estimated_output_bytes": self.estimated_output_bytes,
            "scan": {"ignored_hidden": list(report.ignored_hidden),
                     "cut_symlink_loops": list(report.cut_symlink_loops),
                     "unreadable_dirs": list(report.unreadable_dirs),
                     "other_files": report.other_files, "root_files": report.root_files},
            "shards": [{"name": s.name, "start": s.start, "stop": s.stop, "num_images": s.num_images,
                        "planned_bytes": s.planned_bytes, "estimated_bytes": s.estimated_bytes,
                        "first_path": s.first_path, "last_path": s.last_path} for s in self.shards],
        }


def plan_conversion(
    src: str | os.PathLike[str],
    *,
    to: str,
    shard_size: int | str = DEFAULT_SHARD_SIZE,
    codec: str = "original",
    codec_options: Mapping[str, Any] | None = None,
    include_hidden: bool = False,
    allow_empty: bool = False,
    is_valid_file: Callable[[str], bool] | None = None,
) -> ConversionPlan:
    """Scan ``src`` and plan its conversion to backend ``to`` as :func:`convert` would; write nothing.

    Empty classes are reported, not raised; ``would_fail_empty`` says whether the real conversion
    would refuse them (they exist and ``allow_empty`` is off). Arguments mean what they mean for
    :func:`packer.conversion.run.convert`.

    Raises:
        UnknownNameError: ``to`` or ``codec`` is not registered; the message lists the choices.
        ValueError: ``shard_size`` is not a positive size.
        SourceError: SRC is missing or has no class folder.
    """
    backend = get_backend(to).name
    chosen_codec = get_codec(codec, codec_options)
    codec_name = chosen_codec.name
    planned_size = parse_size(shard_size)
    index = scan_imagefolder(os.path.abspath(os.fspath(src)), is_valid_file=is_valid_file,
                             allow_empty=True, include_hidden=include_hidden)
    items = index.items
    sizes = [max(item.size, 0) for item in items]
    counts = [0] * len(index.classes)
    for item in items:
        counts[item.label] += 1
    empty = tuple(name for name, count in zip(index.classes, counts, strict=True) if count == 0)
    original = codec_name == "original"
    shards = tuple(
        PlannedShard(plan.index, shard_name(plan.index, get_backend(backend).suffix), plan.start,
                     plan.stop, plan.planned_bytes,
                     _shard_bytes(backend, sizes[plan.start:plan.stop]) if original else None,
                     items[plan.start].relpath, items[plan.stop - 1].relpath)
        for plan in plan_shards(planned_item_sizes(index, chosen_codec), planned_size)
    )
    estimate: int | None = None
    if original and all(s.estimated_bytes is not None for s in shards):
        report = index.report
        listed = report.ignored_hidden + report.cut_symlink_loops + report.unreadable_dirs
        paths = sum(len(item.relpath.encode("utf-8", "surrogateescape")) for item in items)
        estimate = (sum(s.estimated_bytes or 0 for s in shards)
                    + 2 * _NPY_HEADER + 16 * len(items) + 8 + paths
                    + _MANIFEST_FIXED + len(index.root) + _MANIFEST_PER_SHARD * len(shards)
                    + sum(len(json.dumps(c)) + _MANIFEST_PER_CLASS for c in index.classes)
                    + sum(len(json.dumps(p)) + _MANIFEST_PER_PATH for p in listed))
    return ConversionPlan(
        src=index.root, backend=backend, codec=codec_name, shard_size=planned_size,
        classes=index.classes, class_counts=tuple(counts), empty_classes=empty,
        would_fail_empty=bool(empty) and not allow_empty, include_hidden=include_hidden,
        extensions=Counter(os.path.splitext(item.relpath)[1].lower() for item in items),
        num_images=len(items), source_bytes=sum(sizes),
        unknown_sizes=sum(1 for item in items if item.size < 0), report=index.report,
        shards=shards, estimated_output_bytes=estimate,
    )


