"""WebDataset shards as a source: one ``.tar`` shard, a folder of them (sorted by name), or a
brace pattern / glob (``train-{000000..000146}.tar``), never extracted.

Samples are grouped as the ``webdataset`` library groups them (:mod:`packer.source.webdataset.samples`),
in shard order. A sample's image is its first member with an image extension (jpg, jpeg, png,
webp, ppm, pgm, bmp, tif, tiff); its relative path is that member's path (``cat/0001.jpg``, so a
WebDataset made from a tree keeps the tree's paths). Its label comes from the ``cls`` member
(integer text) by default, or the member or JSON field ``label_field`` names (``txt``,
``cls2``, ``json:label``, ``json:meta.label``). Integer labels are the targets (class names
``"0"`` to the largest, gaps keep their class, as list files do); text labels are class names,
sorted as ImageFolder sorts folders. Other members up to 64 KiB of UTF-8 (json, txt, ...) are
kept per sample as metadata (``{"json": {...}, "txt": "..."}``); other images and binary or
larger members are not, and a note says how many.

A sample without an image is skipped as ``missing_image``, one without a usable label as
``missing_label``: they are items (with label 0, never recorded) whose read raises that
reason, so the manifest lists them with the other skipped files. An item's identity is its
image member's size and modification time; reading is one ``pread`` per image, as for archives.
"""

from __future__ import annotations

import json
import os
import tarfile
from dataclasses import replace
from typing import Any, ClassVar, Final

from packer.errors import EmptySourceError, SourceError, SourceNotFoundError
from packer.source.archive.members import MISSING_IMAGE, MISSING_LABEL, clean_name
from packer.source.archive.reader import ArchivePart, ArchiveReader
from packer.source.archive.source import archive_format, index_archive, listing_part
from packer.source.archive.spool import remove_spool
from packer.source.base import ItemReader, ScanReport, Source, SourceIndex, SourceItem
from packer.source.classnames import read_class_names
from packer.source.registry import expand_pattern
from packer.source.statuses import MISSING_MEMBER
from packer.source.webdataset.fields import (
    MemberFieldReader,
    member_extension,
    member_locations,
    member_schema,
    parse_member_fields,
)
from packer.source.webdataset.samples import (
    IMAGE_EXTENSIONS,
    TEXT_LIMIT,
    Grouping,
    LabelField,
    Sample,
    split_key,
)

__all__ = ["WebDatasetSource", "shard_paths"]

#: Shard file names taken from a folder.
SHARD_SUFFIXES: Final = (".tar", ".tar.gz", ".tgz")
_PROBE_MEMBERS: Final = 16


def shard_paths(location: str) -> list[str]:
    """The shards ``location`` names: itself, a folder's shards sorted by name, or a pattern's.

    Raises:
        SourceNotFoundError: nothing there, a folder without shards, or a pattern naming a
            missing file or none.
    """
    if os.path.isdir(location):
        shards = sorted(os.path.join(location, name) for name in os.listdir(location)
                        if name.lower().endswith(SHARD_SUFFIXES) and not name.startswith(".")
                        and os.path.isfile(os.path.join(location, name)))
        if not shards:
            raise SourceNotFoundError(f"The folder {location!r} holds no WebDataset shard (.tar).")
        return shards
    if os.path.isfile(location):
        return [location]
    paths = expand_pattern(location)
    missing = [path for path in paths if not os.path.isfile(path)]
    if not paths or missing or paths == [location]:
        what = f"names {missing[0]!r}, which does not exist" if missing and paths != [location] else \
            "matches no file"
        raise SourceNotFoundError(f"WebDataset source {location!r} {what}: give a .tar shard, a folder "
                                  "of shards, or a pattern (train-{000000..000146}.tar, or a glob).")
    return paths


def _keep(name: str, size: int) -> bool:
    """Read a member's bytes while indexing: small members other than images (labels, metadata)."""
    split = split_key(name)
    return size <= TEXT_LIMIT and split is not None and split[1] not in IMAGE_EXTENSIONS


class WebDatasetSource(Source):
    """WebDataset shards (see the module docstring)."""

    kind: ClassVar[str] = "webdataset"
    takes: ClassVar[frozenset[str]] = frozenset({"label_field", "fields", "classes_file"})

    def __init__(self, location: str, options: Any) -> None:
        super().__init__(location, options)
        self.field = LabelField.parse(options.label_field or "cls")
        self.fields = parse_member_fields(options.fields, where=location)
        self.scanned: tuple[SourceIndex, tuple[ArchivePart, ...], bool] | None = None

    def _keep_label(self, name: str, size: int) -> bool:
        """With fields, only the label member is read while indexing: the field members are
        read by byte range when their sample is packed (metadata is not kept)."""
        split = split_key(name)
        return size <= TEXT_LIMIT and split is not None and split[1] == self.field.extension

    @classmethod
    def looks_like_shard(cls, path: str) -> bool:
        """Whether the tar at ``path`` looks like a WebDataset shard, from its first members'
        headers: most samples pair an image with other members of its key (``x.jpg`` and
        ``x.cls``), unlike a tree's lone images (``cat/x.jpg``)."""
        names: list[str] = []
        try:
            with tarfile.open(path, "r:") as tar:
                for _ in range(4 * _PROBE_MEMBERS):
                    info = tar.next()
                    if info is None or len(names) >= _PROBE_MEMBERS:
                        break
                    if info.isreg():
                        names.append(clean_name(info.name) or "")
        except (tarfile.TarError, OSError, EOFError, ValueError, OverflowError):
            return False  # a header tarfile cannot follow (a size of 2**100) is no shard of ours
        groups: list[set[str]] = []
        previous = None
        for name in names:
            split = split_key(name)
            if split is None or name.rpartition("/")[2].startswith("."):
                continue
            if groups and split[0] == previous:
                groups[-1].add(split[1])
            else:
                groups.append({split[1]})
                previous = split[0]
        if len(names) >= _PROBE_MEMBERS and len(groups) > 1:
            groups.pop()  # the last sample may go on past the members read
        paired = sum(1 for exts in groups if exts & IMAGE_EXTENSIONS and exts - IMAGE_EXTENSIONS)
        return paired > 0 and 2 * paired >= len(groups)

    def _scanned(self) -> tuple[SourceIndex, tuple[ArchivePart, ...], bool]:
        if self.scanned is not None:
            return self.scanned
        grouping = Grouping()
        parts: list[ArchivePart] = []
        notes: list[str] = []
        for number, shard in enumerate(shard_paths(self.location)):
            if archive_format(shard) == "zip":
                raise SourceError(f"{shard!r} is a zip: WebDataset shards are tar files (.tar, .tar.gz).")
            listing, contents = index_archive(shard, keep=self._keep_label if self.fields else _keep,
                                              nested=False, spool_max_bytes=self.options.max_bytes)
            parts.append(listing_part(listing, self.options.max_bytes))
            notes.extend(listing.notes)
            grouping.add_shard(number, listing.members, contents)
        if not grouping.samples:
            raise EmptySourceError(f"Found no WebDataset sample in {self.location!r}: its shards hold no "
                                   "member named <key>.<extension>.")
        notes.extend(grouping.notes())
        raw = [self.field.raw(sample) for sample in grouping.samples]
        labelled = not self.fields or self.options.label_field is not None or any(v is not None for v in raw)
        classes, labels, numbers = (self._classes(grouping.samples, raw) if labelled
                                    else ((), [-1] * len(raw), True))  # -1: no class label
        if self.fields:
            items, texts, columns = self._field_items(grouping.samples, labels, notes)
            schema = member_schema(self.fields, classes if labelled else None)
        else:
            items, texts, columns = self._metadata_items(grouping.samples, labels, notes)
            schema = ()
        index = SourceIndex(self.inside(), classes, tuple(items), ScanReport(notes=tuple(notes)),
                            metadata=texts, metadata_columns=columns, schema=schema)
        self.scanned = index, tuple(parts), numbers
        return self.scanned

    def _metadata_items(self, samples: list[Sample], labels: list[int | None], notes: list[str]
                        ) -> tuple[list[SourceItem], tuple[str, ...], tuple[str, ...]]:
        """The samples as items of an image and a class, their small text members as metadata."""
        items, metadata, left = [], [], 0
        used: dict[str, int] = {}
        for sample, label in zip(samples, labels, strict=True):
            image = sample.image
            kept, dropped = self.field.metadata(sample, image[0] if image else None)
            left += dropped
            metadata.append(kept)
            items.append(_item(sample, label, image, used))
        if left:
            notes.append(f"{left} member(s) besides the samples' images were not kept as metadata "
                         f"(other images, binary, or over {TEXT_LIMIT // 1024} KiB): keep them as "
                         "fields with fields= (EXT:TYPE, e.g. seg.png:mask).")
        columns = tuple(sorted({name for kept in metadata for name in kept}))
        texts = (tuple(json.dumps(kept, sort_keys=True, ensure_ascii=False) for kept in metadata)
                 if columns else ())
        return items, texts, columns

    def _field_items(self, samples: list[Sample], labels: list[int | None], notes: list[str]
                     ) -> tuple[list[SourceItem], tuple[str, ...], tuple[str, ...]]:
        """The samples as items with fields: each one's field members located (in its metadata,
        which is not stored), one lacking a member skipped as ``missing_member``."""
        claimed = frozenset(member_extension(spec) for spec in self.fields)
        label_member = {self.field.extension} if not self.field.path else set()
        items, texts = [], []
        missing: dict[str, int] = {}
        other: dict[str, int] = {}
        used: dict[str, int] = {}
        for sample, label in zip(samples, labels, strict=True):
            image = sample.image_besides(claimed)
            located, lacking = member_locations(sample.members, self.fields)
            item = _item(sample, label, image, used)
            if lacking and image is not None and label is not None:
                item = replace(item, locator=(*item.locator[:2], MISSING_MEMBER))
            for ext in lacking:
                missing[ext] = missing.get(ext, 0) + 1
            for ext in sample.members.keys() - claimed - label_member - {image[0] if image else ""}:
                other[ext] = other.get(ext, 0) + 1
            items.append(item)
            texts.append(located)
        if missing:
            notes.append(f"{sum(1 for i in items if i.locator[2] == MISSING_MEMBER)} sample(s) lack a member "
                         f"a field names ({_counts(missing)}): skipped as missing_member.")
        if other:
            notes.append(f"members that are no field were not kept ({_counts(other)}): keep them "
                         "with fields= (EXT:TYPE, e.g. json:json).")
        return items, tuple(texts), ()

    def _classes(self, samples: list[Sample], raw: list[int | str | None]
                 ) -> tuple[tuple[str, ...], list[int | None], bool]:
        """Class names, each sample's label (None: missing) and whether labels are numbers."""
        numbers: list[tuple[Sample, int]] = []
        names: list[tuple[Sample, str]] = []
        for sample, value in zip(samples, raw, strict=True):
            if isinstance(value, int):
                numbers.append((sample, value))
            elif isinstance(value, str):
                names.append((sample, value))
        where = f"WebDataset {self.location!r}"
        if numbers and names:
            raise SourceError(f"{where}: labels ({self.field}) mix numbers (sample {numbers[0][0].key!r}) "
                              f"and class names (sample {names[0][0].key!r}): use one kind.")
        if not numbers and not names:
            seen = sorted({ext for sample in samples for ext in sample.members})
            raise SourceError(f"{where}: no sample has a usable label in {str(self.field)!r} (members "
                              f"seen: {', '.join(seen)}): name the label with label_field= (cls, txt, "
                              "json:label).")
        negative = [(s, v) for s, v in numbers if v < 0]
        if negative:
            raise SourceError(f"{where}: sample {negative[0][0].key!r} has the negative label "
                              f"{negative[0][1]}.")
        if numbers:
            top = max(v for _, v in numbers)
            targets = [v if isinstance(v, int) else None for v in raw]
            return self._number_names(top, where), targets, True
        classes = tuple(sorted({v for _, v in names}))
        position = {name: i for i, name in enumerate(classes)}
        return classes, [position[v] if isinstance(v, str) else None for v in raw], False

    def _number_names(self, top: int, where: str) -> tuple[str, ...]:
        """The names of classes 0 to ``top``: ``classes_file=``'s (line i names class i), else numbers."""
        if self.options.classes_file is None:
            return tuple(str(i) for i in range(top + 1))
        names = read_class_names(self.options.classes_file)
        if top >= len(names):
            raise SourceError(f"{where}: a sample has the label {top}, but the classes file "
                              f"{self.options.classes_file!r} names {len(names)} classes: fix one of them.")
        return names

    def scan(self) -> SourceIndex:
        """Index the shards' headers (reading only their small non-image members) and group samples.

        Raises:
            SourceNotFoundError: no shard there.
            SourceError: a shard is no tar, labels mix numbers and names, or no sample has one.
            EmptySourceError: the shards hold no sample.
        """
        return self._scanned()[0]

    def reader(self) -> ItemReader:
        """Reads images (and the members ``fields=`` names) by byte range from the shards."""
        shards = ArchiveReader(self._scanned()[1], self.location, max_bytes=self.options.max_bytes)
        return MemberFieldReader(shards, self.fields) if self.fields else shards

    def close(self) -> None:
        """Delete the decompressed spools this node made of ``.tar.gz`` shards (if any)."""
        for part in self.scanned[1] if self.scanned is not None else ():
            if part.compressed:
                remove_spool(part.path, part.size, part.mtime_ns)

    def inside(self) -> str:
        """The shard, the folder of shards, or the folder a pattern's shards share."""
        if os.path.exists(self.location):
            return self.location
        return os.path.commonpath([os.path.dirname(path) for path in shard_paths(self.location)])

    def item_words(self) -> str:
        """A WebDataset source's items are its samples."""
        return "samples"

    def not_packed(self, report: ScanReport) -> str | None:
        """Nothing beyond the notes: they say what of the shards was not kept."""
        return None

    def describe(self) -> str:
        """``WebDataset shards (147 files)``."""
        parts = self._scanned()[1]
        return f"WebDataset shards ({len(parts)} file{'s' if len(parts) != 1 else ''})"

    def manifest_extra(self) -> dict[str, Any]:
        """What the manifest records of the shards (``extra.webdataset``)."""
        index, parts, numbers = self._scanned()
        return {"webdataset": {"shards": len(parts), "label_field": str(self.field),
                               "labels": "numbers" if numbers else "names",
                               "metadata_columns": list(index.metadata_columns),
                               **({"fields": [str(spec) for spec in self.fields]} if self.fields else {})}}


def _item(sample: Sample, label: int | None, image: tuple[str, Any] | None,
          used: dict[str, int]) -> SourceItem:
    """The sample as an item; one without image or label carries the status its read raises."""
    if image is None:
        first = next(iter(sample.members.values()))[0]
        relpath = _unique(sample.key, "", used)
        return SourceItem(relpath, 0, 0, first.mtime_ns, (sample.part, first.offset, MISSING_IMAGE))
    member = image[1]
    relpath = _unique(sample.key, member.name[len(sample.key):], used)
    if label is None:
        locator = member.locator(sample.part, MISSING_LABEL)
        return SourceItem(relpath, 0, member.size, member.mtime_ns, locator)
    return SourceItem(relpath, label, member.size, member.mtime_ns, member.locator(sample.part))


def _counts(by_extension: dict[str, int]) -> str:
    """``seg.png 3, txt 1``: extensions by count, most first."""
    return ", ".join(f"{ext} {n}" for ext, n in sorted(by_extension.items(), key=lambda kv: (-kv[1], kv[0])))


def _unique(key: str, suffix: str, used: dict[str, int]) -> str:
    """``key + suffix``, or ``key~N + suffix`` for the Nth sample of a key seen before."""
    count = used.get(key + suffix, 0) + 1
    used[key + suffix] = count
    return key + suffix if count == 1 else f"{key}~{count}{suffix}"
