"""What a dataset holds, from its manifest alone: what ``packer info`` shows."""

from __future__ import annotations

import os
from typing import Any

from packer.conversion.destination import UPDATE_NAME
from packer.format.manifest import Manifest, dataset_versions

__all__ = ["dataset_info"]


def dataset_info(root: str | os.PathLike[str]) -> dict[str, Any]:
    """Summarise the dataset at ``root`` from its manifest alone (no shard is read).

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError: see :meth:`Manifest.load`.
    """
    path = os.path.abspath(os.fspath(root))
    manifest = Manifest.load(path)
    listing = {"list": manifest.extra["list"]} if "list" in manifest.extra else {}
    return {
        **listing,
        "path": path,
        "format_version": manifest.format_version,
        "version": manifest.version,
        "versions_kept": dataset_versions(path) or [manifest.version],
        "last_update": manifest.last_update,
        "update_in_progress": os.path.exists(os.path.join(path, UPDATE_NAME)),
        "created_by": manifest.created_by,
        "created_at": manifest.created_at,
        "source": manifest.source,
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

