"""Upload a conversion's shards to its URL as they finish, keeping the staging folder bounded.

Each finished shard is put to the store by a small pool of threads (a large one in parts, by
the client's multipart upload), skipped where an object of its name and size is already there
(shards are named by their content); once it is up, the shard is noted in the staging folder's
ledger (:func:`packer.conversion.receipts.mark_uploaded`) and its local file removed, so a
resumed conversion keeps it without its bytes. While the shards finished but not yet up hold
more than the bound, the coordinator waits before taking the next result: the staging folder
holds at most the bound plus the shards the workers are writing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from packer.conversion.receipts import ShardResult, mark_uploaded
from packer.conversion.remote.staging import claim_staging
from packer.errors import StoreError
from packer.sizes import format_size
from packer.store import Store

__all__ = ["ShardUploads"]

log = logging.getLogger(__name__)


class ShardUploads:
    """The uploads of one conversion's shards from ``staging`` to ``remote``; see the module
    docstring. Use as a context manager: leaving it waits for every upload (or, after an
    error, for those already started) and raises the first upload's failure."""

    def __init__(self, staging: str, remote: Store, *, limit: int, threads: int = 4) -> None:
        self.staging = staging
        self.remote = remote
        self.limit = max(1, limit)
        self._pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="packer-upload")
        self._room = threading.Condition()
        self._pending = 0  # bytes of shards finished and still in the staging folder
        self._failure: BaseException | None = None
        self._queued: set[str] = set()
        self._claimed = False

    def __enter__(self) -> ShardUploads:
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=error is not None)
        if error is None:
            self.raise_failure()

    def __call__(self, result: ShardResult) -> None:
        """Queue ``result``'s shard (if its file is still here); wait while too much is pending."""
        self.raise_failure()
        if not self._claimed:  # DST's slot is open by now: the folder is the conversion's
            claim_staging(self.staging, self.remote.url)
            self._claimed = True
        relpath, size = result.entry.path, result.entry.num_bytes
        if relpath in self._queued or not os.path.exists(os.path.join(self.staging, relpath)):
            return  # already up (a resumed run's kept shard), or queued
        self._queued.add(relpath)
        with self._room:
            while self._pending and self._pending + size > self.limit and self._failure is None:
                self._room.wait()
            self._pending += size
        self._pool.submit(self._upload, relpath, size)  # a failure is kept and raised here

    def raise_failure(self) -> None:
        """Raise the first upload's failure, if one failed."""
        if self._failure is not None:
            raise self._failure

    def _upload(self, relpath: str, size: int) -> None:
        path = os.path.join(self.staging, relpath)
        try:
            if self.remote.sizes([relpath]).get(relpath) != size:
                self.remote.put_file(relpath, path)
            mark_uploaded(self.staging, relpath, size)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            log.debug("uploaded %s (%s) to %s", relpath, format_size(size), self.remote.url)
        except BaseException as err:  # noqa: BLE001  # handed to the coordinator, raised there
            with self._room:
                self._failure = self._failure or _upload_error(self.remote, relpath, err)
        finally:
            with self._room:
                self._pending -= size
                self._room.notify_all()


def _upload_error(remote: Store, relpath: str, err: BaseException) -> BaseException:
    if isinstance(err, (StoreError, OSError)):
        failure = StoreError(f"Uploading {relpath} to {remote.describe(relpath)} failed: {err}. The "
                             "shards already up are kept: run the same conversion again with "
                             "resume=True to go on.")
        failure.__cause__ = err
        return failure
    return err
