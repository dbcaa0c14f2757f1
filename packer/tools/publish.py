"""``packer push DST URL`` and ``packer gc URL``: publish a dataset to object storage, and
collect what no kept version there uses.

A push uploads in an order no reader can catch half-done: every shard and sample-index file of
every version DST keeps, then ``versions/<n>.json``, then ``index.json`` last (the switch).
Files are named by their content, so an object already there with the same name and size holds
these bytes and is skipped: a push after ``packer update`` uploads only the new files, and an
interrupted push is finished by running it again. Large files go up in parts (the client's
multipart upload). A reader that opened version 1 keeps reading it after a push of version 2,
until a gc removes it. A push and a gc of one URL hold the dataset's lease there
(:mod:`packer.store.lease.claim`: a conditional put), so two never run at once, from any host.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from packer.conversion.remote.publishing import PushResult, dataset_files, packer_keys, publish_files
from packer.errors import NotADatasetError
from packer.format.manifest import MANIFEST_NAME, VERSIONS_DIR, Manifest, dataset_versions, version_key
from packer.store import Store, open_store
from packer.store.cache.fetching import copy_object
from packer.store.lease.claim import held_lease

__all__ = ["PushResult", "RemoteGcResult", "collect_remote_garbage", "pull_dataset", "push_dataset"]

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class RemoteGcResult:
    """What :func:`collect_remote_garbage` kept and deleted (or would, with ``dry_run``)."""

    url: str
    current_version: int
    kept_versions: tuple[int, ...]
    removed: tuple[str, ...]
    freed_bytes: int
    dry_run: bool = False


def push_dataset(src: str | os.PathLike[str], url: str, *,
                 storage_options: Mapping[str, Any] | None = None, workers: int = 8,
                 on_file: Callable[[str, int], None] | None = None) -> PushResult:
    """Upload the complete local dataset ``src`` to ``url``; see the module docstring.

    Args:
        src: A finished dataset on a local path.
        url: Where to publish it (``s3://bucket/prefix``, ``gs://...``, ``az://...``).
        storage_options: Credentials and client options (:mod:`packer.store`).
        workers: Files uploaded at once.
        on_file: Called with each file's key and size once it is uploaded or skipped.

    Raises:
        NotADatasetError, IncompleteDatasetError: ``src`` is not a complete dataset.
        DatasetBusyError: another push (or a gc) holds the dataset's lease at ``url``; the
            message names it.
        StoreError: the URL cannot be written (missing bucket, credentials, read-only HTTP).
    """
    local = open_store(src)
    if not local.is_local:
        raise NotADatasetError(f"push uploads a local dataset; {os.fspath(src)!r} is a URL")
    Manifest.load(local)  # not a complete dataset: say so before touching the URL
    remote = open_store(url, storage_options)
    remote.check_writable()
    with held_lease(remote, "push", what=f"push to {remote.url!r}") as lease:
        return publish_files(local, remote, lease, workers=workers, on_file=on_file)


def collect_remote_garbage(url: str | Store, *, keep_versions: int = 1, dry_run: bool = False,
                           storage_options: Mapping[str, Any] | None = None) -> RemoteGcResult:
    """Delete the objects under ``url`` that none of the newest ``keep_versions`` versions uses.

    Only packer's objects are considered (``shard-*``, ``samples/*``, ``versions/*.json``);
    anything else under the prefix is left alone.

    Raises:
        ValueError: ``keep_versions`` is below 1.
        NotADatasetError: no dataset at ``url``.
        DatasetBusyError: a push or another gc holds the dataset's lease at ``url``.
        StoreError: the URL cannot be listed or written.
    """
    if keep_versions < 1:
        raise ValueError(f"keep_versions must be at least 1 (the current version), not {keep_versions}")
    store = open_store(url, storage_options)
    current = Manifest.load(store)  # no dataset there: say so before writing a lease
    with contextlib.ExitStack() as stack:
        lease = None if dry_run else stack.enter_context(
            held_lease(store, "gc", what=f"collect garbage in {store.url!r}"))
        if lease is not None:
            current = Manifest.load(store)  # as it is now that nobody else writes
        listed = store.list()
        victims, kept = _unused(store, current, listed, keep_versions)
        if lease is not None and victims:
            lease.check()  # delete nothing under a lease another process took over
            for key in victims:
                store.delete(key)
    return RemoteGcResult(store.url, current.version, tuple(kept), tuple(victims),
                          sum(listed[key] for key in victims), dry_run)


def _unused(store: Store, current: Manifest, listed: dict[str, int],
            keep_versions: int) -> tuple[list[str], list[int]]:
    """The keys none of the newest ``keep_versions`` versions uses (versions' manifests first,
    so that a reader never finds a version whose files are gone), and the versions kept."""
    versions = dataset_versions(store)
    older = [v for v in versions if v < current.version]
    kept = [*older[len(older) - min(keep_versions - 1, len(older)):], current.version]
    used: set[str] = {MANIFEST_NAME}
    for version in kept:
        manifest = current if version == current.version else Manifest.load(store, version)
        used.update(dataset_files(manifest))
        used.add(version_key(version))
    # Only packer's own names: a key someone else put under the prefix (one with '..' included,
    # which S3 allows) is never deleted.
    ours = packer_keys(listed)
    victims = [key for key in ours if key not in used]
    # manifests of removed versions first: a reader never finds a version whose files are gone
    victims.sort(key=lambda key: not key.startswith(f"{VERSIONS_DIR}/"))
    return victims, kept


def _download(store: Store, key: str, size: int, path: str) -> None:
    """Copy ``key`` into the local file ``path``, byte for byte as the store has it."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        copy_object(store, key, size, handle)


def pull_dataset(url: str, dst: str | os.PathLike[str], *,
                 storage_options: Mapping[str, Any] | None = None, workers: int = 8) -> str:
    """Download the current version of the dataset at ``url`` into the empty or new local
    directory ``dst``, byte for byte as the store holds it (nothing is checked or cached: what
    :func:`packer.verify_dataset` does on a URL); return ``dst``'s path.

    Raises:
        NotADatasetError: no dataset at ``url``.
        StoreError: the URL cannot be read.
    """
    store = open_store(url, storage_options)
    text = store.read(MANIFEST_NAME)
    manifest = Manifest.from_json(text.decode("utf-8"), source=store.describe(MANIFEST_NAME))
    local = open_store(dst)
    files = dataset_files(manifest)
    sizes = store.sizes(list(files))

    def fetch(key: str) -> None:
        size = sizes.get(key)
        if size is not None:  # a missing file stays missing: verify reports it
            _download(store, key, size, local.local_path(key) or key)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        list(pool.map(fetch, sorted(files)))
    local.put(MANIFEST_NAME, text)
    return local.url
