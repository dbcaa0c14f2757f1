"""WebDataset's sample grammar: members grouped by key, and a sample's label and metadata.

As the ``webdataset`` library reads a shard: a member's key is its path up to the first ``.``
of its base name and its extension the rest, lower-cased (``cat/001.seg.png`` is key
``cat/001``, extension ``seg.png``); consecutive members with the same key form one sample.
A key that comes back later (not next to its first members) makes a new sample, and so does
an extension repeated inside a sample (``webdataset`` would refuse it). Names without an
extension and top-level ``__meta__`` members belong to no sample. Samples never span shards.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Final

from packer.errors import SourceError
from packer.source.archive.members import DIR, FILE, Member

__all__ = ["IMAGE_EXTENSIONS", "TEXT_LIMIT", "Grouping", "LabelField", "Sample", "split_key"]

#: Extensions of a sample's image member, first match in the sample wins.
IMAGE_EXTENSIONS: Final = frozenset({"jpg", "jpeg", "png", "webp", "ppm", "pgm", "bmp", "tif", "tiff"})
#: Other members are kept as metadata (and read for labels) up to this size, as UTF-8 text.
TEXT_LIMIT: Final = 64 * 1024
_INTEGER = re.compile(r"[+-]?\d+\Z")


def split_key(name: str) -> tuple[str, str] | None:
    """``(key, extension)`` of a member path, WebDataset's way; None when it has no extension."""
    folder, _, base = name.rpartition("/")
    dot = base.find(".")
    if dot <= 0:
        return None
    return (f"{folder}/" if folder else "") + base[:dot], base[dot + 1:].lower()


@dataclass
class Sample:
    """One sample: its shard, key and members by extension (with their bytes if kept)."""

    part: int
    key: str
    members: dict[str, tuple[Member, bytes | None]] = field(default_factory=dict)

    @property
    def image(self) -> tuple[str, Member] | None:
        """The image member, with its extension: the first with an image extension."""
        return self.image_besides(frozenset())

    def image_besides(self, claimed: frozenset[str]) -> tuple[str, Member] | None:
        """The first member with an image extension that is not ``claimed`` (by a field)."""
        return next(((ext, m) for ext, (m, _) in self.members.items()
                     if ext in IMAGE_EXTENSIONS and ext not in claimed), None)


@dataclass
class Grouping:
    """Samples of shards grouped in order, and counts of what fell outside them (for notes)."""

    samples: list[Sample] = field(default_factory=list)
    no_extension: int = 0
    not_files: int = 0
    repeated_keys: int = 0
    repeated_extensions: int = 0
    _seen: set[str] = field(default_factory=set)

    def add_shard(self, part: int, members: tuple[Member, ...], contents: dict[int, bytes]) -> None:
        """Group the members of shard number ``part`` (``contents``: kept bytes by position)."""
        current: Sample | None = None
        for position, member in enumerate(members):
            if member.kind != FILE:
                self.not_files += member.kind != DIR
                continue
            if "/" not in member.name and member.name.startswith("__") and member.name.endswith("__"):
                continue
            split = split_key(member.name)
            if split is None:
                self.no_extension += 1
                continue
            key, ext = split
            if current is None or key != current.key or ext in current.members:
                if current is not None and key == current.key:
                    self.repeated_extensions += 1
                elif key in self._seen:
                    self.repeated_keys += 1
                self._seen.add(key)
                current = Sample(part, key)
                self.samples.append(current)
            current.members[ext] = (member, contents.get(position))

    def notes(self) -> list[str]:
        """One sentence per kind of oddity seen."""
        notes = []
        if self.no_extension:
            notes.append(f"{self.no_extension} member(s) have no extension, so belong to no sample "
                         "(WebDataset ignores them too).")
        if self.not_files:
            notes.append(f"{self.not_files} member(s) are symbolic links or special files: ignored.")
        if self.repeated_keys:
            notes.append(f"{self.repeated_keys} sample key(s) occur again after other samples: each "
                         "later occurrence is a sample of its own (its path gets a ~2, ~3, ... suffix).")
        if self.repeated_extensions:
            notes.append(f"{self.repeated_extensions} member(s) repeat an extension within a sample: "
                         "each starts a new sample.")
        return notes


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True)
class LabelField:
    """Where a sample's label is: a member (``cls``, ``txt``, ``cls2``) or a field of a JSON
    member (``json:label``, nested ``json:meta.label``)."""

    extension: str
    path: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> LabelField:
        """Read ``--label-field``.

        Raises:
            SourceError: an empty member or field name.
        """
        extension, _, path = text.partition(":")
        fields = tuple(path.split(".")) if path else ()
        if not extension.strip() or any(not part for part in fields) or (":" in text and not path):
            raise SourceError(f"label_field={text!r} names no member: give an extension (cls, txt) "
                              "or a JSON member's field (json:label, json:meta.label).")
        return cls(extension.strip().lower(), fields)

    def __str__(self) -> str:
        return self.extension + (":" + ".".join(self.path) if self.path else "")

    def raw(self, sample: Sample) -> int | str | None:
        """The sample's label: an integer, a class name, or None when missing or unusable."""
        found = sample.members.get(self.extension)
        text = _text(found[1]) if found is not None else None
        if text is None:
            return None
        if not self.path:
            text = text.strip()
            if not text:
                return None
            return int(text) if _INTEGER.match(text) else text
        try:
            value: Any = json.loads(text)
        except ValueError:
            return None
        for name in self.path:
            value = value.get(name) if isinstance(value, dict) else None
        if isinstance(value, str):
            return value.strip() or None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def metadata(self, sample: Sample, image: str | None) -> tuple[dict[str, Any], int]:
        """The sample's other members as metadata (``{"json": {...}, "txt": "..."}``), and how
        many were left out (other images, binary or larger than :data:`TEXT_LIMIT`)."""
        kept: dict[str, Any] = {}
        left = 0
        for ext, (_, data) in sample.members.items():
            if ext == image or (ext == self.extension and not self.path):
                continue
            text = _text(data) if ext not in IMAGE_EXTENSIONS else None
            if text is None:
                left += 1
                continue
            if ext == "json" or ext.endswith(".json"):
                try:
                    kept[ext] = json.loads(text)
                    continue
                except ValueError:
                    pass
            kept[ext] = text
        return kept, left
