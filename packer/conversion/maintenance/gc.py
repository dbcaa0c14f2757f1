"""``packer gc DST``: delete the files of versions nobody keeps.

An update never rewrites a file: it writes new shards and index files and switches
``index.json`` to a new version, and the previous version's files stay, so that a training job
that opened it keeps reading it. :func:`collect_garbage` keeps the newest ``keep_versions``
versions (the current one always) and deletes every shard, sample-index file and version
manifest that none of them names. It never deletes a file a kept version uses, nor the shards an
interrupted update finished (its receipts name them: running the update again keeps them).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from packer.conversion.destination.lock import dataset_lock
from packer.conversion.destination.state import Destination, DestinationState
from packer.conversion.receipts import receipted_files
from packer.errors import NotADatasetError
from packer.format.manifest import VERSIONS_DIR, Manifest, dataset_versions
from packer.format.sample_index import SAMPLES_DIR
from packer.store.durable import fsync_dir

__all__ = ["GcResult", "collect_garbage"]

@dataclass(frozen=True)
class GcResult:
    """What :func:`collect_garbage` kept and deleted (or would, with ``dry_run``)."""

    dst: str
    current_version: int
    kept_versions: tuple[int, ...]
    removed_versions: tuple[int, ...]
    removed_files: tuple[str, ...]
    freed_bytes: int
    dry_run: bool = False


def collect_garbage(dst: str | os.PathLike[str], *, keep_versions: int = 1,
                    dry_run: bool = False) -> GcResult:
    """Delete what the newest ``keep_versions`` versions of DST do not use; see the module docstring.

    Raises:
        ValueError: ``keep_versions`` is below 1.
        NotADatasetError, IncompleteDatasetError: DST is not a complete dataset.
        DatasetBusyError: another process (an update, gc, convert, merge) holds DST's lease;
            the message names it.
    """
    if keep_versions < 1:
        raise ValueError(f"keep_versions must be at least 1 (the current version), not {keep_versions}")
    destination = Destination(dst)
    path = destination.path
    if destination.state is not DestinationState.COMPLETE:
        Manifest.load(path)  # raises the right error for an incomplete or foreign DST
        raise NotADatasetError(f"{path!r} is not a packer dataset: give the DST of a conversion.")
    with dataset_lock(path, "collect garbage in", command="gc") as lease:
        current = Manifest.load(path)
        versions = dataset_versions(path)
        older = [v for v in versions if v < current.version]
        kept = [*older[len(older) - min(keep_versions - 1, len(older)):], current.version]
        used = receipted_files(path)  # an interrupted update's finished shards: kept for its rerun
        for version in kept:
            manifest = current if version == current.version else Manifest.load(path, version)
            used.update(shard.path for shard in manifest.shards)
            used.update(entry.path for entry in manifest.sample_index.values())
        removed_versions = [v for v in versions if v not in kept]
        victims = [os.path.join(VERSIONS_DIR, f"{v:05d}.json") for v in removed_versions]
        victims += [name for name in sorted(os.listdir(path)) if name.startswith("shard-")
                    and name not in used and os.path.isfile(os.path.join(path, name))]
        samples = os.path.join(path, SAMPLES_DIR)
        if os.path.isdir(samples):
            victims += [f"{SAMPLES_DIR}/{name}" for name in sorted(os.listdir(samples))
                        if f"{SAMPLES_DIR}/{name}" not in used]
        freed = 0
        if victims and not dry_run:
            lease.check()  # never delete under a lease another process took over
        for victim in victims:
            full = os.path.join(path, victim)
            with contextlib.suppress(FileNotFoundError):
                freed += os.path.getsize(full)
                if not dry_run:
                    os.unlink(full)
        if victims and not dry_run:
            for folder in (path, samples, os.path.join(path, VERSIONS_DIR)):
                if os.path.isdir(folder):
                    fsync_dir(folder)
    return GcResult(path, current.version, tuple(kept), tuple(removed_versions), tuple(victims), freed,
                    dry_run)
