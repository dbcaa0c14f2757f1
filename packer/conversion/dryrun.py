"""Plan a conversion without doing it: what ``packer convert ... --dry-run`` shows.

:func:`plan_conversion` scans SRC and cuts the shard plan exactly as :func:`packer.conversion.run.convert`
does, then stops: nothing is written and DST is not needed (a few samples are read only to size
a source's fields, below). The resulting :class:`ConversionPlan` holds the class map, per-class
counts, the extension mix, what the scan ignored, empty classes, the shards and an estimate of
the output size;
:func:`packer.cli.formatting.format_plan` renders it for people, :meth:`ConversionPlan.to_dict`
for ``--json``.

The output size is an estimate from the source sizes (``original`` codec only): it assumes every
file is packed, so files skipped as unreadable make the real output smaller. Its parts are the
shards (payload plus the backend's overhead, modelled below), the sample index and the manifest.
A source with fields besides its image (boxes, masks, captions) has up to
:data:`FIELD_SAMPLE` of its samples, spread evenly over it, read and encoded as a conversion
would (nothing is written): what their records hold beyond the image, on average, is added to
every sample's size in the estimate (the shard plan itself is cut on the images' sizes, as a
conversion cuts it).
"""

from __future__ import annotations

import os
import statistics
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from packer.conversion.job import scan_source
from packer.conversion.options import ConversionOptions, conversion_options, option_keywords
from packer.conversion.outcome import known_skip_counts, nothing_to_pack
from packer.conversion.plan import planned_item_sizes, shard_name
from packer.conversion.schemas import conversion_schema
from packer.conversion.sharding import plan_shards
from packer.format.codecs import Codec
from packer.format.fields.base import FieldValueError
from packer.format.fields.encoding import SampleEncoder
from packer.format.fields.schema import Schema
from packer.format.fields.types.images import ImageType
from packer.format.manifest import estimate_manifest_bytes
from packer.format.sample_index import estimate_index_bytes
from packer.source.base import ItemReader, ScanReport, Source, SourceIndex
from packer.source.sourcefile import UnpackableFile

__all__ = ["FIELD_SAMPLE", "ConversionPlan", "PlannedShard", "dry_run", "plan_conversion"]

#: Samples read and encoded to measure what a source's fields add to each record.
FIELD_SAMPLE = 32

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
    #: The kind of source (:mod:`packer.source.registry`), and how it reads to people.
    source_kind: str = "tree"
    source_description: str = "an ImageFolder tree"
    #: Items the scan already knows will be skipped, by reason (no label, no image): not in
    #: ``class_counts``.
    known_skips: dict[str, int] = field(default_factory=dict, hash=False)
    #: Why the real conversion would stop though every class has images (every item is skipped:
    #: :mod:`packer.conversion.outcome`), or None.
    would_stop: str | None = None
    #: SRC as it was given (a pattern stays a pattern), what its items are called, and what the
    #: scan saw and will not pack, in the source kind's words (None: only the notes say it).
    location: str = ""
    item_words: str = "images"
    not_packed: str | None = None
    #: The fields each sample would hold (``[{"name", "type", "params"}, ...]``, as the manifest
    #: records them), or empty for ImageFolder's ``{image, label}``.
    schema: tuple[dict[str, Any], ...] = field(default=(), hash=False)

    @property
    def class_to_idx(self) -> dict[str, int]:
        """Class name to label, as torchvision's ``ImageFolder.class_to_idx``."""
        return {name: i for i, name in enumerate(self.classes)}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (what ``--dry-run --json`` would print)."""
        report = self.report
        return {
            "dry_run": True, "src": self.src, "source_kind": self.source_kind, "backend": self.backend,
            "codec": self.codec,
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
                     "other_files": report.other_files, "root_files": report.root_files,
                     "notes": list(report.notes)},
            "known_skips": dict(self.known_skips),
            **({"would_stop": self.would_stop} if self.would_stop is not None else {}),
            **({"schema": [dict(f) for f in self.schema]} if self.schema else {}),
            "shards": [{"name": s.name, "start": s.start, "stop": s.stop, "num_images": s.num_images,
                        "planned_bytes": s.planned_bytes, "estimated_bytes": s.estimated_bytes,
                        "first_path": s.first_path, "last_path": s.last_path} for s in self.shards],
        }


@option_keywords
def plan_conversion(src: str | os.PathLike[str], options: ConversionOptions | None = None,
                    **option_values: Any) -> ConversionPlan:
    """Scan ``src`` and plan its conversion to backend ``to`` as :func:`convert` would; write nothing.

    Empty classes are reported, not raised; ``would_fail_empty`` says whether the real conversion
    would refuse them (they exist and ``allow_empty`` is off). Arguments mean what they mean for
    :func:`packer.conversion.run.convert`.

    Raises:
        UnknownNameError: ``to`` or ``codec`` is not registered; the message lists the choices.
        ValueError: ``shard_size`` is not a positive size.
        SourceError: SRC is missing or has no class folder.
    """
    return dry_run(src, conversion_options(options, option_values))


def dry_run(src: str | os.PathLike[str], options: ConversionOptions) -> ConversionPlan:
    """:func:`plan_conversion` with its options already built: what ``--dry-run`` calls.

    Only the options that shape the plan matter (not ``check``, ``max_pixels``, ``strict``).
    """
    # Empty classes are reported, not refused; the plan says whether the run would refuse them.
    source, index = scan_source(src, replace(options, allow_empty=True))
    with source:
        return _plan_of(source, index, options)


def _plan_of(source: Source, index: SourceIndex, options: ConversionOptions) -> ConversionPlan:
    """The dry run's plan of a scanned source."""
    backend, chosen_codec = options.backend, options.stored_as
    codec_name = chosen_codec.name
    planned_size = options.shard_bytes
    include_hidden, allow_empty = options.include_hidden, options.allow_empty
    items = index.items
    sizes = [max(item.size, 0) for item in items]
    reader = source.reader()
    counts, known_skips = known_skip_counts(index, reader)
    # Every item known to be skipped (counting by class would miss a schema without a class label).
    every_skipped = bool(items) and sum(known_skips.values()) == len(items)
    stops = nothing_to_pack(source, known_skips) if every_skipped else None
    schema = conversion_schema(index, options)
    empty = tuple(name for name, count in zip(index.classes, counts, strict=True) if count == 0)
    original = chosen_codec.keeps_source_bytes
    extra = _field_bytes(index, reader, schema, chosen_codec) if original else 0
    records = [size + extra for size in sizes]
    shards = tuple(
        PlannedShard(plan.index, shard_name(plan.index), plan.start,
                     plan.stop, plan.planned_bytes,
                     backend.estimate_shard_bytes(records[plan.start:plan.stop]) if original else None,
                     items[plan.start].relpath, items[plan.stop - 1].relpath)
        for plan in plan_shards(planned_item_sizes(index, reader, chosen_codec),
                                [item.relpath for item in items], planned_size)
    )
    estimate: int | None = None
    if original and all(s.estimated_bytes is not None for s in shards):
        report = index.report
        listed = report.ignored_hidden + report.cut_symlink_loops + report.unreadable_dirs
        paths = sum(len(item.relpath.encode("utf-8", "surrogateescape")) for item in items)
        estimate = (sum(s.estimated_bytes or 0 for s in shards)
                    + estimate_index_bytes(len(items), paths)
                    # index.json, and its copy versions/00001.json
                    + 2 * estimate_manifest_bytes(index.root, len(shards), index.classes, listed))
    return ConversionPlan(
        src=index.root, backend=backend.name, codec=codec_name, shard_size=planned_size,
        classes=index.classes, class_counts=tuple(counts), empty_classes=empty,
        would_fail_empty=(bool(empty) and not allow_empty and stops is None
                          and source.refuses_empty_classes), include_hidden=include_hidden,
        extensions=Counter(os.path.splitext(item.relpath)[1].lower() for item in items),
        num_images=len(items), source_bytes=sum(sizes),
        unknown_sizes=sum(1 for item in items if item.size < 0), report=index.report,
        shards=shards, estimated_output_bytes=estimate, source_kind=source.kind,
        source_description=source.describe(), known_skips=dict(sorted(known_skips.items())),
        would_stop=stops, location=source.location, item_words=source.item_words(),
        not_packed=source.not_packed(index.report),
        schema=tuple(schema.to_list()) if schema is not None else (),
    )


def _field_bytes(index: SourceIndex, reader: ItemReader, schema: Schema | None, codec: Codec) -> int:
    """The mean bytes a record holds beyond its image: up to :data:`FIELD_SAMPLE` items spread
    over the source, read and encoded as a shard task would; 0 for an ``{image, label}`` source
    (its record is the image itself) or when none of the sample can be packed."""
    if schema is None or all(f.type == "image" for f in schema.in_record()):
        return 0
    encoder = SampleEncoder(schema, bound={f.name: ImageType(codec) for f in schema if f.type == "image"})
    items = index.items
    extras = []
    for position in range(0, len(items), max(1, len(items) // FIELD_SAMPLE))[:FIELD_SAMPLE]:
        item = items[position]
        if reader.known_skip(item) is not None:
            continue
        try:
            data = reader.read(item)
            values = reader.values(item, data, index.metadata[position] if index.metadata else "")
            extras.append(len(encoder.encode(values)) - len(data))
        except (UnpackableFile, FieldValueError):
            continue
    return round(statistics.mean(extras)) if extras else 0
