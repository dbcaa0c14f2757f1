"""Convert into a URL: the shards are written to a local staging folder, uploaded as they finish
and removed there, then the sample index, the version's manifest and ``index.json`` go up last.

The conversion is the local one (same plan, same shard bytes, same manifest), run in the
staging folder (:mod:`.staging`) with :class:`~.uploads.ShardUploads` taking each shard as it is
finished; the dataset's lease at the URL (a conditional put) is held from before the scan to
the switch, so two conversions, pushes or gcs of one URL never run at once, from any host.
Killed at any instant, the URL still holds what it held before (``index.json`` is written last)
and the staging folder what ``resume`` goes on from: the shards already up are kept (noted in
the folder's ledger), the others written again. A resume over a URL whose dataset is already
this conversion's does nothing. With ``overwrite``, the URL's earlier dataset stays readable
until the switch; its files the new one does not use are deleted after it.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from packer.conversion.destination.state import DestinationState
from packer.conversion.engines.base import Engine
from packer.conversion.execution import ConversionResult, write_job
from packer.conversion.job import Job, plan_job
from packer.conversion.options import ConversionOptions
from packer.conversion.remote.publishing import dataset_files, packer_keys, publish_files
from packer.conversion.remote.staging import check_staging, staging_folder
from packer.conversion.remote.uploads import ShardUploads
from packer.errors import OutputError, OutputExistsError, PackerError
from packer.format.manifest import MANIFEST_NAME, Manifest, version_key
from packer.sizes import parse_size
from packer.store import Store, open_store
from packer.store.lease.claim import held_lease

__all__ = ["convert_to_url"]

#: Staging holds at most this many shards finished and not yet up (plus those being written).
STAGED_SHARDS = 4


def convert_to_url(src: str | os.PathLike[str], url: str, options: ConversionOptions, *,
                   engine: Engine, staging: str | os.PathLike[str] | None = None,
                   staging_limit: int | str | None = None,
                   storage_options: Mapping[str, Any] | None = None, overwrite: bool = False,
                   resume: bool = False, progress: bool = False) -> ConversionResult:
    """:func:`packer.convert` with a URL as DST; see the module docstring.

    Raises:
        OutputExistsError: the URL holds a dataset and neither ``overwrite`` nor (for this very
            conversion) ``resume`` applies; or the staging folder holds an interrupted run.
        DatasetBusyError: another process holds the dataset's lease at the URL.
        StoreError: the URL cannot be written, or an upload failed (``resume`` goes on).
    """
    started = time.perf_counter()
    remote = open_store(url, storage_options)
    remote.check_writable()
    folder = staging_folder(remote.url, staging)
    check_staging(folder, remote.url)
    limit = STAGED_SHARDS * options.shard_bytes if staging_limit is None else parse_size(staging_limit)
    with held_lease(remote, "convert", what=f"convert into {remote.url!r}") as lease:
        earlier = _manifest_at(remote)
        if earlier is not None and not (overwrite or resume):
            raise OutputExistsError(f"{remote.url} already holds a packer dataset: choose another URL, "
                                    "or replace it (overwrite=True).")
        job = _plan(src, folder, remote.url, options, overwrite=overwrite, resume=resume)
        with job.source:  # what reading made on this machine (an archive's spool) goes at the end
            if resume and earlier is not None and not overwrite:
                if earlier.extra.get("plan_fingerprint") != job.plan.fingerprint:
                    raise OutputError(f"{remote.url} holds a dataset of another source or other options: "
                                      "nothing to resume. Choose another URL, or replace it "
                                      "(overwrite=True).")
                if job.state is DestinationState.EMPTY:  # published, and its staging folder gone
                    return ConversionResult(remote.url, earlier, job.plan.items,
                                            time.perf_counter() - started, 0,
                                            resumed_shards=len(earlier.shards), already_complete=True)
            with ShardUploads(folder, remote, limit=limit) as uploads:
                result = write_job(job, engine, resume=resume, progress=progress, started=started,
                                   on_shard=uploads)
        pushed = publish_files(open_store(folder), remote, lease)
        if earlier is not None:
            _delete_unused(remote, result.manifest)
    shutil.rmtree(folder, ignore_errors=True)
    return replace(result, dst=remote.url, seconds=time.perf_counter() - started,
                   already_complete=result.already_complete and not pushed.uploaded_bytes)


def _plan(src: str | os.PathLike[str], folder: str, url: str, options: ConversionOptions, *,
          overwrite: bool, resume: bool) -> Job:
    """:func:`plan_job` on the staging folder, its refusals told in terms of the URL."""
    try:
        return plan_job(src, folder, options, overwrite=overwrite, resume=resume, num_tasks=None)
    except OutputExistsError as err:
        raise OutputExistsError(f"An interrupted conversion to {url} is staged in {folder!r}: finish "
                                "it with resume=True, or start again with overwrite=True.") from err


def _manifest_at(remote: Store) -> Manifest | None:
    """The dataset the URL holds now, or None."""
    if not remote.exists(MANIFEST_NAME):
        return None
    try:
        return Manifest.load(remote)
    except PackerError as err:
        raise OutputError(f"{remote.describe(MANIFEST_NAME)} is not a packer manifest ({err}): packer "
                          "will not replace it. Choose another URL.") from err


def _delete_unused(remote: Store, current: Manifest) -> None:
    """After an overwrite's switch: the earlier dataset's files (every version's: all of them
    packer's names) that the new one does not use."""
    used = {MANIFEST_NAME, *dataset_files(current), version_key(current.version)}
    for key in packer_keys(remote.list()):
        if key not in used:
            remote.delete(key)
