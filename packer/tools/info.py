"""What a dataset holds, from its manifest alone: what ``packer info`` shows."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packer.conversion.destination.state import UPDATE_NAME
from packer.errors import StoreError
from packer.format import manifest as manifests
from packer.format.manifest import MANIFEST_NAME, Manifest, ScanInfo, ShardEntry, SkippedFile
from packer.store import Store, open_store
from packer.store.lease.claim import lease_holders
from packer.tools.layout import recorded_listing, source_record

__all__ = ["DatasetInfo", "dataset_info", "dataset_versions"]


def dataset_versions(root: str | os.PathLike[str], *,
                     storage_options: Mapping[str, Any] | None = None) -> list[int]:
    """The versions the dataset at ``root`` (a path or a URL) keeps, oldest first: what
    ``open_dataset(root, version=n)`` can pin. Empty where the store cannot be listed (HTTP).

    Raises:
        StoreError: an object store cannot be listed (credentials, network).
    """
    return manifests.dataset_versions(open_store(root, storage_options))


def _versions(store: Store) -> list[int]:
    """The versions kept; none listed where a store lets us read but not list."""
    try:
        return manifests.dataset_versions(store)
    except StoreError:
        return []


def _leases(store: Store) -> list[dict[str, Any]]:
    """Who holds the dataset's lease now (stale holders marked); none where the store cannot list."""
    try:
        return [{"slot": slot, **holder.as_dict()} for slot, holder in lease_holders(store)]
    except StoreError:
        return []


@dataclass(frozen=True)
class DatasetInfo:
    """What :func:`dataset_info` found: the manifest's facts, the versions kept and who holds the
    lease now. ``to_dict()`` is the JSON document of ``packer info --json``."""

    path: str
    format_version: int
    version: int
    versions_kept: tuple[int, ...]
    last_update: Mapping[str, Any] | None
    update_in_progress: bool
    leases: tuple[Mapping[str, Any], ...]  # the processes writing it now (a stale one says why)
    created_by: str
    created_at: str
    source: str
    source_kind: str | None  # the kind of source (None for datasets made before packer 0.3)
    source_params: Mapping[str, Any] | None
    source_notes: tuple[str, ...] | None
    backend: str
    codec: str
    codec_params: Mapping[str, Any]
    check: str
    classes: tuple[str, ...]
    class_counts: Mapping[str, int]
    num_samples: int
    num_bytes: int
    shards: tuple[ShardEntry, ...]
    skipped: tuple[SkippedFile, ...]
    scan: ScanInfo
    listing: Mapping[str, Any] | None  # how a list file was read; None for other sources
    #: A dataset with fields: its schema (``{"name", "type", "params"}`` each); () for an
    #: ImageFolder dataset (the schema ``{image, label}``), whose JSON has no ``fields`` key.
    fields: tuple[Mapping[str, Any], ...] = ()
    #: The algorithm of the checksums (``sha256``, ``blake3``: :mod:`packer.digests`); in the
    #: JSON only when it is not ``sha256``, as in the manifest.
    digest: str = "sha256"

    @property
    def num_classes(self) -> int:
        """How many classes."""
        return len(self.classes)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with stable keys (the ``--json`` document)."""
        return {
            **({"list": dict(self.listing)} if self.listing is not None else {}),
            "path": self.path, "format_version": self.format_version, "version": self.version,
            "versions_kept": list(self.versions_kept), "last_update": self.last_update,
            "update_in_progress": self.update_in_progress, "leases": [dict(h) for h in self.leases],
            "created_by": self.created_by, "created_at": self.created_at, "source": self.source,
            "source_kind": self.source_kind, "source_params": self.source_params,
            "source_notes": None if self.source_notes is None else list(self.source_notes),
            "backend": self.backend, "codec": self.codec, "codec_params": self.codec_params,
            "check": self.check, "num_samples": self.num_samples, "num_classes": self.num_classes,
            "classes": list(self.classes), "class_counts": dict(self.class_counts),
            "num_bytes": self.num_bytes,
            **({"fields": [dict(f) for f in self.fields]} if self.fields else {}),
            **({"digest": self.digest} if self.digest != "sha256" else {}),
            "shards": [{"path": s.path, "first": s.first, "num_samples": s.num_samples,
                        "num_bytes": s.num_bytes, "sha256": s.sha256} for s in self.shards],
            "skipped": [{"path": s.path, "reason": s.reason, "detail": s.detail} for s in self.skipped],
            "scan": {
                "include_hidden": self.scan.include_hidden,
                "ignored_hidden": list(self.scan.ignored_hidden),
                "cut_symlink_loops": list(self.scan.cut_symlink_loops),
                "unreadable_dirs": list(self.scan.unreadable_dirs),
                "other_files": self.scan.other_files,
                "root_files": self.scan.root_files,
            },
        }

    def __getitem__(self, key: str) -> Any:
        """packer 0.3's dict access (``info["num_samples"]``), kept with a warning until 0.4."""
        warnings.warn("dataset_info() returns a DatasetInfo record since packer 0.3.1, and indexing it "
                      f"is deprecated and will be removed in packer 0.4: use .{key} (or "
                      f".to_dict()[{key!r}] for the JSON form)", DeprecationWarning, stacklevel=2)
        return self.to_dict()[key]


def dataset_info(root: str | os.PathLike[str], *,
                 storage_options: Mapping[str, Any] | None = None) -> DatasetInfo:
    """Summarise the dataset at ``root`` (a path or a URL) from its manifest alone (no shard
    is read), and who holds its lease (``leases``: the process writing it now, if any).

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError: see :meth:`Manifest.load`.
        StoreError: a URL cannot be reached or read.
    """
    store = open_store(root, storage_options)
    manifest = Manifest.load(store)
    named = store.describe(MANIFEST_NAME)
    kind, params, notes = source_record(manifest, named)
    return DatasetInfo(
        path=store.url, format_version=manifest.format_version, version=manifest.version,
        digest=manifest.digest,
        versions_kept=tuple(_versions(store) or [manifest.version]), last_update=manifest.last_update,
        update_in_progress=store.exists(UPDATE_NAME) if store.is_local else False,
        leases=tuple(_leases(store)), created_by=manifest.created_by, created_at=manifest.created_at,
        source=manifest.source, source_kind=kind, source_params=params,
        source_notes=None if notes is None else tuple(notes), backend=manifest.backend,
        codec=manifest.codec, codec_params=manifest.codec_params, check=manifest.check,
        classes=tuple(manifest.classes),
        class_counts=dict(zip(manifest.classes, manifest.class_counts, strict=True)),
        num_samples=manifest.num_samples, num_bytes=manifest.num_bytes, shards=tuple(manifest.shards),
        skipped=tuple(manifest.skipped), scan=manifest.scan, listing=recorded_listing(manifest, named),
        fields=() if manifest.schema.is_imagefolder() else tuple(manifest.schema.to_list()))
