"""The manifest ``DST/index.json``: what a packed dataset holds, written last to mean "complete".

A conversion first writes ``DST/.packer-in-progress`` (the marker), then the shards and the
sample index, then ``index.json`` atomically, then removes the marker. So a directory with
``index.json`` is complete, one with only the marker is an interrupted conversion, and one
with neither is not a packer dataset. JSON is written with sorted keys and two-space indent so
that two runs of the same conversion differ only in ``created_at``.

Versions (format 2): each manifest has a ``version`` number (1 for a conversion, one more for
each ``packer update``) and is also kept as ``DST/versions/<number>.json``, written before
``index.json`` names it. ``index.json`` is the current version; a reader that opened version
``n`` reopens ``versions/<n>.json`` in its workers, so an update switching ``index.json`` under
a running training job changes nothing it reads (:mod:`packer.format.shardset`).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from packer.digests import LEGACY_DIGEST, DigestAlgorithm, get_digest
from packer.errors import (
    BucketNotFoundError,
    IncompleteDatasetError,
    ManifestError,
    NotADatasetError,
    SchemaError,
    UnsafeKeyError,
    VersionGoneError,
)
from packer.format.fields.schema import Schema, imagefolder_schema
from packer.format.format_versions import (
    DIGEST_FORMAT_VERSION,
    FIELDS_FORMAT_VERSION,
    FORMAT_VERSION,
    LATEST_FORMAT_VERSION,
    check_digest,
    format_version_of,
)
from packer.format.manifest_fields import get_field as _get
from packer.format.manifest_fields import get_items as _get_items
from packer.format.manifest_fields import record as _record
from packer.keys import check_key, check_name
from packer.store import Store, open_store
from packer.store.durable import atomic_write_bytes

__all__ = [
    "DIGEST_FORMAT_VERSION",
    "FIELDS_FORMAT_VERSION",
    "FORMAT_VERSION",
    "LATEST_FORMAT_VERSION",
    "IN_PROGRESS_NAME",
    "MANIFEST_NAME",
    "FileEntry",
    "Manifest",
    "ScanInfo",
    "ShardEntry",
    "SkippedFile",
    "VERSIONS_DIR",
    "dataset_versions",
    "estimate_manifest_bytes",
    "format_version_of",
    "version_key",
    "version_path",
]

MANIFEST_NAME: Final = "index.json"
IN_PROGRESS_NAME: Final = ".packer-in-progress"
#: Every kept version's manifest, ``versions/00001.json``, ...
VERSIONS_DIR: Final = "versions"


_VERSION_FILE = re.compile(r"(\d{5,})\.json")


def version_key(version: int) -> str:
    """The key (path relative to the dataset's root) of version ``version``'s manifest."""
    return f"{VERSIONS_DIR}/{version:05d}.json"


def version_path(root: str | os.PathLike[str], version: int) -> str:
    """Where version ``version`` of the dataset at ``root`` keeps its manifest."""
    return os.path.join(os.fspath(root), VERSIONS_DIR, f"{version:05d}.json")


def dataset_versions(root: str | os.PathLike[str] | Store) -> list[int]:
    """The versions the dataset at ``root`` (a path or a store) keeps a manifest of
    (``versions/<n>.json``), oldest first; none where the store cannot be listed (HTTP).

    Raises:
        StoreError: an object store cannot be listed (credentials, network).
    """
    if isinstance(root, Store) and not root.is_local:
        if root.read_only:
            return []
        names = [key.rsplit("/", 1)[-1] for key in root.list(VERSIONS_DIR)]
    else:
        folder = os.path.join(root.url if isinstance(root, Store) else os.fspath(root), VERSIONS_DIR)
        names = os.listdir(folder) if os.path.isdir(folder) else []
    found = (_VERSION_FILE.fullmatch(name) for name in names)
    return sorted(int(match.group(1)) for match in found if match)


@dataclass(frozen=True, slots=True)
class FileEntry:
    """A file of the dataset with its size and checksum (sample index arrays): the hex digest
    by the manifest's ``digest`` algorithm (the key is ``sha256`` since format 1)."""

    path: str
    num_bytes: int
    sha256: str


@dataclass(frozen=True, slots=True)
class ShardEntry:
    """One shard: its file, the global index of its first sample, its size and checksum, and
    what it was made of (``inputs``: the sources' paths, sizes and mtimes; ``contents``: their
    bytes), by which ``packer update`` knows it can keep the shard. Format 1 has neither. The
    checksum is the hex digest by the manifest's ``digest`` algorithm (the key is ``sha256``
    since format 1, whatever the algorithm; the shard's file name is its first 16 digits)."""

    path: str
    first: int
    num_samples: int
    num_bytes: int
    sha256: str
    inputs: str = ""
    contents: str = ""


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A source file with an image name that was not packed, why (a reason code), and its
    size and mtime when it was looked at (-1 when unknown), for ``packer update``."""

    path: str
    reason: str
    detail: str = ""
    size: int = -1
    mtime_ns: int = -1


@dataclass(frozen=True, slots=True)
class ScanInfo:
    """How the tree was scanned, including what ImageFolder would have done differently."""

    filter: str
    extensions: tuple[str, ...]
    include_hidden: bool
    symlink_loops: str
    ignored_hidden: tuple[str, ...] = ()
    cut_symlink_loops: tuple[str, ...] = ()
    unreadable_dirs: tuple[str, ...] = ()
    other_files: int = 0
    root_files: int = 0


@dataclass(frozen=True)
class Manifest:
    """Self-description of a packed dataset."""

    backend: str
    codec: str
    codec_params: dict[str, Any]
    check: str
    max_pixels: int
    classes: tuple[str, ...]
    class_counts: tuple[int, ...]
    shards: tuple[ShardEntry, ...]
    sample_index: dict[str, FileEntry]
    skipped: tuple[SkippedFile, ...]
    scan: ScanInfo
    source: str
    created_by: str
    created_at: str
    format_version: int = FORMAT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    #: 1 for a conversion, one more for each ``packer update``.
    version: int = 1
    #: What the update that made this version did (files added, removed, changed; shards
    #: reused and written; bytes written); empty for a conversion.
    last_update: dict[str, Any] = field(default_factory=dict)
    #: The algorithm of every checksum here (:mod:`packer.digests`); written only when it is
    #: not ``sha256``, which manifests before format 4 all use.
    digest: str = LEGACY_DIGEST

    @functools.cached_property
    def schema(self) -> Schema:
        """The fields every sample holds: ``extra.schema`` (format 3), else ImageFolder's
        ``{image, label}`` with this manifest's codec and classes."""
        if "schema" in self.extra:
            return Schema.from_list(self.extra["schema"], source="the manifest's extra.schema")
        return imagefolder_schema(self.codec, self.codec_params, self.classes, check=self.check,
                                  max_pixels=self.max_pixels)

    @property
    def num_samples(self) -> int:
        """Samples in the dataset (skipped files excluded)."""
        return sum(shard.num_samples for shard in self.shards)

    @property
    def num_bytes(self) -> int:
        """Bytes of every shard and sample-index file."""
        return (sum(s.num_bytes for s in self.shards)
                + sum(f.num_bytes for f in self.sample_index.values()))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; ``num_samples`` and ``format`` are added for readers of the file."""
        data = asdict(self)
        if self.digest == LEGACY_DIGEST:
            del data["digest"]
        data["format"] = "packer"
        data["num_samples"] = self.num_samples
        return data

    def to_json(self) -> str:
        """Stable JSON text: sorted keys, two-space indent, trailing newline."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, *, source: str = "<string>") -> Manifest:
        """Parse and validate manifest text.

        Raises:
            ManifestError: malformed JSON, a missing or ill-typed field, or a newer format;
                the message names ``source`` and the field.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ManifestError(f"{source} is not valid JSON ({err}); the dataset is damaged: "
                                "re-convert it.") from err
        if not isinstance(data, dict) or data.get("format") != "packer":
            raise ManifestError(f"{source} is not a packer manifest.")
        version = data.get("format_version")
        if not isinstance(version, int) or version > LATEST_FORMAT_VERSION:
            raise ManifestError(f"{source} has format version {version!r}; this packer reads "
                                f"version {LATEST_FORMAT_VERSION} or older: upgrade packer.")
        try:
            manifest = cls(
                backend=_get(data, "backend", str, source),
                codec=_get(data, "codec", str, source),
                codec_params=_get(data, "codec_params", dict, source),
                check=_get(data, "check", str, source),
                max_pixels=_get(data, "max_pixels", int, source),
                classes=_get_items(data, "classes", str, source),
                class_counts=_get_items(data, "class_counts", int, source),
                shards=tuple(_record(ShardEntry, s, source, f"shards[{i}]")
                             for i, s in enumerate(_get(data, "shards", list, source))),
                sample_index={k: _record(FileEntry, v, source, f"sample_index[{k!r}]")
                              for k, v in _get(data, "sample_index", dict, source).items()},
                skipped=tuple(_record(SkippedFile, s, source, f"skipped[{i}]")
                              for i, s in enumerate(_get(data, "skipped", list, source))),
                scan=_record(ScanInfo, _get(data, "scan", dict, source), source, "scan"),
                source=_get(data, "source", str, source),
                created_by=_get(data, "created_by", str, source),
                created_at=_get(data, "created_at", str, source),
                format_version=version,
                extra=_get(data, "extra", dict, source) if "extra" in data else {},
                version=_get(data, "version", int, source) if "version" in data else 1,
                last_update=_get(data, "last_update", dict, source) if "last_update" in data else {},
                digest=_get(data, "digest", str, source) if "digest" in data else LEGACY_DIGEST,
            )
        except TypeError as err:
            raise ManifestError(f"{source} has a malformed entry ({err}); re-convert.") from err
        if len(manifest.class_counts) != len(manifest.classes):
            raise ManifestError(f"{source} counts samples of {len(manifest.class_counts)} classes but names "
                                f"{len(manifest.classes)}; the dataset is damaged: re-convert.")
        _check_keys(manifest, source)
        _check_schema(manifest, source)
        check_digest(manifest.digest, manifest.format_version, source)
        return manifest

    @property
    def digest_algorithm(self) -> DigestAlgorithm:
        """The algorithm of this manifest's checksums (MissingExtraError: blake3's wheel is missing)."""
        return get_digest(self.digest)

    def save(self, root: str | os.PathLike[str]) -> str:
        """Write ``root/versions/<version>.json``, then ``root/index.json`` (the switch to this
        version), each atomically and durably; return the path of ``index.json``."""
        data = self.to_json().encode("utf-8")
        os.makedirs(os.path.join(os.fspath(root), VERSIONS_DIR), exist_ok=True)
        atomic_write_bytes(version_path(root, self.version), data)
        path = os.path.join(os.fspath(root), MANIFEST_NAME)
        atomic_write_bytes(path, data)
        return path

    @classmethod
    def load(cls, root: str | os.PathLike[str] | Store, version: int | None = None) -> Manifest:
        """Read ``root/index.json`` (the current version), or version ``version``; ``root`` is
        a path or a store (:func:`packer.store.open_store`).

        Raises:
            NotADatasetError: ``root`` is missing or holds no packer dataset.
            IncompleteDatasetError: a conversion into ``root`` started and never finished.
            ManifestError: the manifest is damaged or from a newer packer.
            VersionGoneError: version ``version`` was removed (``packer gc``).
        """
        store = open_store(root)
        if version is not None:
            return cls._load_version(store, version)
        try:
            text = store.read(MANIFEST_NAME).decode("utf-8")
        except BucketNotFoundError:
            raise
        except (FileNotFoundError, NotADirectoryError):
            top = store.describe()
            if store.exists(IN_PROGRESS_NAME):
                raise IncompleteDatasetError(
                    f"{top!r} is incomplete: a conversion into it was interrupted before it wrote "
                    f"{MANIFEST_NAME}. Finish it by running the same convert(..., resume=True) "
                    "(after array tasks: merge()), or start again with overwrite=True.") from None
            if not store.is_local:
                raise NotADatasetError(f"{top!r} holds no packer dataset (no {MANIFEST_NAME}): give "
                                       "the URL push_dataset() published to.") from None
            if not os.path.isdir(top):
                what = "is not a directory" if os.path.exists(top) else "does not exist"
                raise NotADatasetError(f"{top!r} {what}: give the DST of a "
                                       "conversion.") from None
            raise NotADatasetError(f"{top!r} is not a packer dataset (no {MANIFEST_NAME}): give "
                                   "the DST of a finished conversion.") from None
        return cls.from_json(text, source=store.describe(MANIFEST_NAME))

    @classmethod
    def _load_version(cls, store: Store, version: int) -> Manifest:
        key = version_key(version)
        try:
            return cls.from_json(store.read(key).decode("utf-8"), source=store.describe(key))
        except FileNotFoundError:
            current = cls.load(store)
            if current.version == version:  # written before versions were kept
                return current
        raise VersionGoneError(f"Version {version} of {store.describe()!r} is gone "
                               "(collect_garbage() removed "
                               f"it; the dataset is at version {current.version}): open the dataset "
                               "again to read the current version, or keep more versions "
                               "(collect_garbage(keep_versions=N)).")


# index.json's size: a fixed part, plus per class, per shard and per listed scan path (measured).
_FIXED_BYTES, _PER_CLASS, _PER_SHARD, _PER_PATH = 2100, 16, 380, 8


def estimate_manifest_bytes(source: str, num_shards: int, classes: Sequence[str],
                            listed_paths: Sequence[str]) -> int:
    """About the size of ``index.json`` for a dataset of ``source`` with these shards, classes
    and scan paths listed (ignored hidden entries, cut loops, unreadable folders)."""
    return (_FIXED_BYTES + len(source) + _PER_SHARD * num_shards
            + sum(len(json.dumps(c)) + _PER_CLASS for c in classes)
            + sum(len(json.dumps(p)) + _PER_PATH for p in listed_paths))


def _check_keys(manifest: Manifest, source: str) -> None:
    """Every path the manifest names is a key inside the dataset, and every class one folder
    name (export makes folders of them): a crafted manifest is refused here, before anything is
    read, written, downloaded or uploaded through it (:mod:`packer.keys`).

    Raises:
        ManifestError: the message is :class:`UnsafeKeyError`'s, naming the key and ``source``.
    """
    try:
        for position, shard in enumerate(manifest.shards):
            check_key(shard.path, source=source, what=f"shards[{position}] path")
        for name, entry in manifest.sample_index.items():
            check_key(entry.path, source=source, what=f"sample_index[{name!r}] path")
        for name in manifest.classes:
            check_name(name, source=source, what="class")
    except UnsafeKeyError as err:
        raise ManifestError(str(err)) from err


def _check_schema(manifest: Manifest, source: str) -> None:
    """A format-3 manifest records a valid schema, a format-2 one none (format 4 may record one).

    Raises:
        ManifestError: the schema is missing, malformed or names an unknown field type (a
            plugin not installed here); the message says which.
    """
    has_schema = "schema" in manifest.extra
    allowed = manifest.format_version >= FIELDS_FORMAT_VERSION
    if (has_schema and not allowed) or (not has_schema and manifest.format_version == FIELDS_FORMAT_VERSION):
        raise ManifestError(f"{source}: format version {manifest.format_version} "
                            f"{'records no' if not has_schema else 'should record no'} schema; "
                            "the dataset is damaged: re-convert it.")
    if has_schema:
        try:
            manifest.schema  # noqa: B018 (parsed and checked, and kept for the readers)
        except SchemaError as err:
            raise ManifestError(f"{source}: {err} (a field type from a plugin needs that plugin "
                                "installed here).") from err

