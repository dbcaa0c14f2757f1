"""DST's moves, each behind one context manager that holds the lease and either finishes or discards.

A run asks for its :class:`Slot` and writes its shards through ``slot.staging``; it commits
with :meth:`Slot.commit`, which checks that the run still holds DST's lease and then writes the
manifest. On leaving the block the move is finished (marker, staging and receipts dropped) when
the run committed, and otherwise undone as far as is safe: what workers left half-written in
staging is deleted, finished shards stay for ``resume=True``. The order of the steps is this
module's business, so no caller can get it wrong:

* :func:`conversion_slot`: the exclusive lease (:func:`~packer.conversion.destination.lock.dataset_lock`),
  then DST must still be in the state it was checked in; a replaced dataset or an abandoned
  run is cleared (the marker is written before anything is deleted, the manifest goes before
  any shard, so a run killed while clearing leaves an incomplete packer directory, never a
  complete-looking one); the plan is recorded in the marker; finished shards are kept when
  resuming.
* :func:`task_slot`: an array task's shared lease; the plan is recorded once, first writer wins
  (:func:`~packer.store.durable.create_exclusively`), and checked by every other task.
* :func:`merge_slot`: the exclusive lease, for ``merge`` to commit what the tasks wrote.
* :func:`update_slot`: a COMPLETE DST (it stays complete) being updated under a lease the
  update already holds (it reads the current version under it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from packer.conversion.destination.lock import dataset_lock
from packer.conversion.destination.state import (
    OWN_NAMES,
    SCANS_DIR,
    TMP_DIR,
    UPDATE_NAME,
    Destination,
    DestinationState,
    json_bytes,
)
from packer.conversion.plan import JobPlan, shards_of_task
from packer.conversion.receipts import RECEIPTS_DIR, ShardResult
from packer.errors import OutputError, ResumeError
from packer.format.manifest import IN_PROGRESS_NAME, MANIFEST_NAME, VERSIONS_DIR, Manifest
from packer.format.sample_index import SAMPLES_DIR
from packer.store.durable import atomic_write_bytes, create_exclusively, fsync_dir, is_temporary_name
from packer.store.lease.claim import Lease

__all__ = ["Slot", "conversion_slot", "merge_slot", "task_slot", "tidy_after_update", "update_slot"]


@dataclass
class Slot:
    """Where one run writes: its emptied staging folder, its shard numbers (an array task's
    share; all of them otherwise) and those an earlier attempt finished, by number."""

    staging: str
    kept: dict[int, ShardResult]
    shards: tuple[int, ...] = ()
    manifest: Manifest | None = None
    lease: Lease | None = field(default=None, repr=False)

    def commit(self, write: Callable[[], Manifest]) -> Manifest:
        """Check the lease is still held, then ``write()`` the manifest (the switch); leaving
        the block then finishes the move.

        Raises:
            DatasetBusyError: the lease was lost (taken over, or could not be renewed);
                nothing was written.
        """
        if self.lease is not None:
            self.lease.check()
        self.manifest = write()
        return self.manifest


@contextlib.contextmanager
def conversion_slot(destination: Destination, plan: JobPlan, *, keep: bool,
                    expected: DestinationState) -> Iterator[Slot]:
    """Make DST a conversion in progress of ``plan`` for the block (``keep``: the shards of an
    earlier attempt, for ``resume``); see the module docstring.

    Raises:
        DatasetBusyError: another process holds DST's lease.
        OutputError: DST changed since it was checked in state ``expected``, or cannot be written.
    """
    path = destination.path
    with dataset_lock(path, "convert into", command="convert") as lease:
        if destination.state is not expected:
            raise OutputError(f"{path!r} changed while this conversion was planned (it was "
                              f"{expected.value}, it is {destination.state.value} now): another "
                              "process wrote it. Look at it, then run this again.")
        with _writing(path):
            if not keep and destination.state in (DestinationState.COMPLETE, DestinationState.PARTIAL):
                _clear(path)
            staging = _open(path, IN_PROGRESS_NAME, plan.to_marker())
        kept = destination.finished(plan.shard_fingerprints) if keep else {}
        slot = Slot(staging, kept, tuple(range(plan.num_shards)), lease=lease)
        with _settled(slot, path, lambda manifest: _finish(path, manifest)):
            yield slot


@contextlib.contextmanager
def task_slot(destination: Destination, plan: JobPlan, task_id: int) -> Iterator[Slot]:
    """Array task ``task_id``'s share of ``plan``, under its shared lease; its staging folder
    is removed afterwards.

    Raises:
        DatasetBusyError: an exclusive holder (convert, merge, ...) or this same task runs.
        ResumeError: DST holds the plan of another source, other options or task count.
    """
    path = destination.path
    num_tasks = plan.num_tasks or 1
    command = f"convert task {task_id} of {num_tasks}"
    with dataset_lock(path, f"run task {task_id} into", command=command, task=task_id):
        mine = shards_of_task(plan.num_shards, task_id, num_tasks)
        with _writing(path):
            create_exclusively(os.path.join(path, IN_PROGRESS_NAME), json_bytes(plan.to_marker()))
        recorded = destination.marker()
        if recorded.get("fingerprint") != plan.fingerprint:
            raise ResumeError(f"{path!r} holds a conversion of another source tree or other "
                              "options: every array task must run the same command. Use a new DST, "
                              "or finish that conversion first.")
        if recorded.get("num_tasks") != plan.num_tasks:
            raise ResumeError(f"{path!r} is being converted as {recorded.get('num_tasks')} tasks, "
                              f"not {plan.num_tasks}: every array task must use the same num_tasks=.")
        with _writing(path):
            staging = _emptied(os.path.join(path, TMP_DIR, f"task-{task_id:05d}-of-{num_tasks:05d}"))
        kept = destination.finished([plan.shard_fingerprints[i] for i in mine])
        slot = Slot(staging, {mine[position]: result for position, result in kept.items()}, tuple(mine))
        try:
            yield slot
        except BaseException:
            _discard_staging(staging)
            raise
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def merge_slot(destination: Destination) -> Iterator[Slot]:
    """DST under its exclusive lease for ``merge``: a committed manifest finishes it.

    Raises:
        DatasetBusyError: array tasks or another exclusive holder are running.
    """
    path = destination.path
    with dataset_lock(path, "merge", command="merge") as lease:
        _remove_stray_temporaries(path)
        slot = Slot("", {}, lease=lease)
        yield slot
        manifest = slot.manifest
        if manifest is not None:
            _finishing(path, lambda: _finish(path, manifest))


@contextlib.contextmanager
def update_slot(destination: Destination, plan: JobPlan, from_version: int, lease: Lease) -> Iterator[Slot]:
    """Mark a complete DST as being updated from ``from_version`` by ``plan`` (it stays
    complete) under ``lease``, which the caller holds; the slot keeps the shards an interrupted
    run of this very update finished (their receipts match)."""
    path = destination.path
    staging = _open(path, UPDATE_NAME, {"from_version": from_version, "plan": plan.to_marker()})
    slot = Slot(staging, destination.finished(plan.shard_fingerprints), tuple(range(plan.num_shards)),
                lease=lease)
    with _settled(slot, path, lambda _: _close(path, UPDATE_NAME)):
        yield slot


def tidy_after_update(path: str, lease: Lease) -> bool:
    """Remove what an update killed after switching ``index.json`` left beside a dataset that is
    now up to date (its marker, staging and receipts); True when there was something. The caller
    holds ``lease``, so nothing else is writing: whatever is there is a leftover.
    """
    leftovers = [os.path.join(path, name) for name in (UPDATE_NAME, TMP_DIR, RECEIPTS_DIR)]
    if not any(os.path.exists(p) for p in leftovers):
        return False
    lease.check()  # never delete under a lease another process took over
    _finishing(path, lambda: _close(path, UPDATE_NAME))
    return True


@contextlib.contextmanager
def _settled(slot: Slot, path: str, finish: Callable[[Manifest], None]) -> Iterator[None]:
    """Finish after a commit; otherwise (an error, Ctrl-C, or no commit) discard the staging."""
    try:
        yield
    except BaseException:
        _discard_staging(slot.staging)
        raise
    if slot.manifest is None:
        _discard_staging(slot.staging)
        return
    manifest = slot.manifest
    _finishing(path, lambda: finish(manifest))


def _finishing(path: str, finish: Callable[[], None]) -> None:
    try:
        finish()
    except OSError as err:
        raise OutputError(f"The manifest of {path!r} is in place, but removing what the run left "
                          f"beside it failed: {err.strerror or err}. The dataset is complete and "
                          "readable; fix the storage (free space? permissions?).") from err


@contextlib.contextmanager
def _writing(path: str) -> Iterator[None]:
    """Turn an OSError into the error for a DST that cannot be written at all."""
    try:
        yield
    except OSError as err:
        raise OutputError(f"Cannot write to {path!r}: {err.strerror or err}. Choose a writable "
                          "destination, or fix its permissions and run again.") from err


def _open(path: str, marker: str, record: dict[str, Any]) -> str:
    """Write ``marker`` with ``record``; return the emptied staging dir."""
    _remove_stray_temporaries(path)
    atomic_write_bytes(os.path.join(path, marker), json_bytes(record))
    return _emptied(os.path.join(path, TMP_DIR))


def _discard_staging(staging: str) -> None:
    """Delete what stopped workers left half-written in ``staging``; finished shards stay in DST."""
    if staging and os.path.isdir(staging):
        for name in os.listdir(staging):
            victim = os.path.join(staging, name)
            if os.path.isfile(victim) or os.path.islink(victim):
                # a worker thread still finishing may remove its own file first (CI saw it
                # with a thread-pool engine): gone is what we want
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(victim)


def _remove_stray_temporaries(path: str) -> None:
    """Delete half-written ``.<name>.<pid>.tmp`` files a killed run left (see durable.py)."""
    for folder in (path, os.path.join(path, SAMPLES_DIR), os.path.join(path, VERSIONS_DIR),
                   os.path.join(path, RECEIPTS_DIR)):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            victim = os.path.join(folder, name)
            if is_temporary_name(name) and os.path.isfile(victim):
                os.unlink(victim)


def _finish(path: str, manifest: Manifest) -> None:
    """After ``manifest`` is in place: drop the marker, the staging dir, the receipts and any
    shard file it does not name (a shard renamed in by a run killed before its receipt, whose
    redo came out otherwise: a decoder crash pinned on a file of it)."""
    named = {shard.path for shard in manifest.shards}
    for name in os.listdir(path):
        if name.startswith("shard-") and name not in named:
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.unlink(os.path.join(path, name))
    _close(path, IN_PROGRESS_NAME)


def _close(path: str, marker: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(path, marker))
    shutil.rmtree(os.path.join(path, TMP_DIR), ignore_errors=True)
    shutil.rmtree(os.path.join(path, RECEIPTS_DIR), ignore_errors=True)
    shutil.rmtree(os.path.join(path, SCANS_DIR), ignore_errors=True)
    fsync_dir(path)


def _clear(path: str) -> None:
    """Delete the contents of a packer dataset or conversion; keep the directory and its lease."""
    marker = os.path.join(path, IN_PROGRESS_NAME)
    if not os.path.exists(marker):
        atomic_write_bytes(marker, b"{}\n")
    manifest = os.path.join(path, MANIFEST_NAME)
    if os.path.lexists(manifest):
        os.unlink(manifest)
        fsync_dir(path)
    for name in os.listdir(path):
        if name == IN_PROGRESS_NAME or name in OWN_NAMES:
            continue
        victim = os.path.join(path, name)
        if os.path.isdir(victim) and not os.path.islink(victim):
            shutil.rmtree(victim)
        else:
            os.unlink(victim)


def _emptied(staging: str) -> str:
    """``staging``, created empty (what an earlier attempt left there is gone)."""
    if os.path.isdir(staging):
        shutil.rmtree(staging)
    os.makedirs(staging)
    return staging
