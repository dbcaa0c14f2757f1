"""What a dataset holds, from its manifest alone: what ``packer info`` shows."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from packer.conversion.destination.state import UPDATE_NAME
from packer.errors import StoreError
from packer.format.manifest import MANIFEST_NAME, Manifest, dataset_versions
from packer.store import Store, open_store
from packer.store.lease.claim import lease_holders
from packer.tools.layout import recorded_listing, source_record

__all__ = ["dataset_info"]


def _versions(store: Store) -> list[int]:
    """The versions kept; none listed where a store lets us read but not list."""
    try:
        return dataset_versions(store)
    except StoreError:
        return []


def _leases(store: Store) -> list[dict[str, Any]]:
    """Who holds the dataset's lease now (stale holders marked); none where the store cannot list."""
    try:
        return [{"slot": slot, **holder.as_dict()} for slot, holder in lease_holders(store)]
    except StoreError:
        return []


def dataset_info(root: str | os.PathLike[str], *,
                 storage_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Summarise the dataset at ``root`` (a path or a URL) from its manifest alone (no shard
    is read), and who holds its lease (``leases``: the process writing it now, if any).

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError: see :meth:`Manifest.load`.
        StoreError: a URL cannot be reached or read.
    """
    store = open_store(root, storage_options)
    path = store.url
    manifest = Manifest.load(store)
    named = store.describe(MANIFEST_NAME)
    recorded = recorded_listing(manifest, named)
    listing = {"list": recorded} if recorded is not None else {}
    kind, params, notes = source_record(manifest, named)
    return {
        **listing,
        "path": path,
        "format_version": manifest.format_version,
        "version": manifest.version,
        "versions_kept": _versions(store) or [manifest.version],
        "last_update": manifest.last_update,
        "update_in_progress": store.exists(UPDATE_NAME) if store.is_local else False,
        # the processes writing it now: convert, update, gc, push... (a stale one says why)
        "leases": _leases(store),
        "created_by": manifest.created_by,
        "created_at": manifest.created_at,
        "source": manifest.source,
        # the kind of source and what it was read with (absent from datasets before packer 0.3)
        "source_kind": kind,
        "source_params": params,
        "source_notes": notes,
        "backend": manifest.backend,
        "codec": manifest.codec,
        "codec_params": manifest.codec_params,
        "check": manifest.check,
        "num_samples": manifest.num_samples,
        "num_classes": len(manifest.classes),
        "classes": list(manifest.classes),
        "class_counts": dict(zip(manifest.classes, manifest.class_counts, strict=True)),
        "num_bytes": manifest.num_bytes,
        "shards": [
            {"path": s.path, "first": s.first, "num_samples": s.num_samples,
             "num_bytes": s.num_bytes, "sha256": s.sha256}
            for s in manifest.shards
        ],
        "skipped": [{"path": s.path, "reason": s.reason, "detail": s.detail}
                    for s in manifest.skipped],
        "scan": {
            "include_hidden": manifest.scan.include_hidden,
            "ignored_hidden": list(manifest.scan.ignored_hidden),
            "cut_symlink_loops": list(manifest.scan.cut_symlink_loops),
            "unreadable_dirs": list(manifest.scan.unreadable_dirs),
            "other_files": manifest.scan.other_files,
            "root_files": manifest.scan.root_files,
        },
    }

