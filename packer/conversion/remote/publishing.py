"""Publish a local dataset's files to a store in an order no reader can catch half-done.

Every shard and sample-index file of every version the local dataset keeps goes up first, then
``versions/<n>.json``, then ``index.json`` last (the switch). Files are named by their content,
so an object already there with the same name and size holds these bytes and is skipped: a
publish after ``packer update`` uploads only the new files, an interrupted one is finished by
running it again, and shards a conversion to a URL uploaded as they finished (and then removed
locally) are not needed again. The caller holds the dataset's lease at the store.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from packer.errors import IncompleteDatasetError
from packer.format.manifest import MANIFEST_NAME, VERSIONS_DIR, Manifest, dataset_versions, version_key
from packer.keys import is_safe_key
from packer.store import Store
from packer.store.lease.claim import Lease

__all__ = ["CONTENT_NAMED", "PushResult", "dataset_files", "packer_keys", "publish_files"]

log = logging.getLogger(__name__)

#: ``shard-<16 hex>.lmdb``, ``samples/targets-<16 hex>.npy``: names that say their content.
CONTENT_NAMED = re.compile(r".*-[0-9a-f]{16}\.[A-Za-z0-9]+")


@dataclass(frozen=True)
class PushResult:
    """What :func:`packer.push_dataset` uploaded and skipped."""

    src: str
    url: str
    version: int
    uploaded: tuple[str, ...]
    skipped: tuple[str, ...]
    uploaded_bytes: int


def packer_keys(listed: Iterable[str]) -> list[str]:
    """The keys of a listing that are packer's own (``shard-*``, ``samples/*``,
    ``versions/*.json``), sorted: the only ones a gc or an overwrite deletes (a key someone else
    put under the prefix, one with ``..`` included, which S3 allows, never is)."""
    return [key for key in sorted(listed)
            if key.startswith(("shard-", "samples/", f"{VERSIONS_DIR}/")) and is_safe_key(key)]


def dataset_files(manifest: Manifest) -> dict[str, tuple[int, str]]:
    """Every data file a version names: key -> (size, checksum)."""
    files = {shard.path: (shard.num_bytes, shard.sha256) for shard in manifest.shards}
    files.update({entry.path: (entry.num_bytes, entry.sha256) for entry in manifest.sample_index.values()})
    return files


def publish_files(local: Store, remote: Store, lease: Lease, *, workers: int = 8,
                  on_file: Callable[[str, int], None] | None = None) -> PushResult:
    """Upload the complete dataset in the local store ``local`` to ``remote``, where this process
    holds ``lease``; see the module docstring.

    Raises:
        IncompleteDatasetError: a file the dataset names is neither in ``local`` nor already in
            ``remote`` with its size.
        DatasetBusyError: the lease was lost before the switch.
    """
    current = Manifest.load(local)
    versions = [v for v in dataset_versions(local.url) if v <= current.version] or [current.version]
    manifests = {v: current if v == current.version else Manifest.load(local, v) for v in versions}
    wanted: dict[str, tuple[int, str]] = {}
    for manifest in manifests.values():
        wanted.update(dataset_files(manifest))
    present = remote.list()
    todo = [key for key, (size, _) in sorted(wanted.items())
            if not (present.get(key) == size and CONTENT_NAMED.fullmatch(key.rsplit("/", 1)[-1]))]
    skipped = sorted(wanted.keys() - set(todo))
    here = local.sizes(todo)
    missing = [key for key in todo if here.get(key) is None]
    if missing:
        raise IncompleteDatasetError(
            f"{local.url}: {len(missing)} file(s) the dataset names are neither there nor at "
            f"{remote.url} (first: {missing[0]}); nothing was switched. Convert or push it again.")
    for key in skipped:
        if on_file is not None:
            on_file(key, wanted[key][0])

    def upload(key: str) -> None:
        remote.put_file(key, local.local_path(key) or key)
        if on_file is not None:
            on_file(key, wanted[key][0])

    with ThreadPoolExecutor(max(1, workers)) as pool:
        list(pool.map(upload, todo))  # data first: every file any version names
    uploaded = list(todo)
    lease.check()  # switch nothing under a lease another process took over
    for version, manifest in sorted(manifests.items()):  # then the versions' manifests
        key = version_key(version)
        text = local.read(key) if local.exists(key) else manifest.to_json().encode("utf-8")
        if present.get(key) != len(text) or version == current.version:
            remote.put(key, text)
            uploaded.append(key)
    remote.put(MANIFEST_NAME, local.read(MANIFEST_NAME))  # the switch, last
    uploaded.append(MANIFEST_NAME)
    log.info("published %s to %s: %d files uploaded, %d already there", local.url, remote.url,
             len(uploaded), len(skipped))
    return PushResult(local.url, remote.url, current.version, tuple(uploaded), tuple(skipped),
                      sum(wanted[k][0] for k in todo))
