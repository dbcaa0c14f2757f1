"""DST's lock: who may write a dataset now, across hosts.

``update``, ``collect_garbage``, ``convert``, ``merge`` (and ``push`` at its URL) each hold the
dataset's exclusive lease (:mod:`packer.store.lease.claim`: a key created only if it is absent,
renewed while its holder runs) for their whole write; array tasks (``convert_task``) each hold
a shared one, so that they run together but never alongside an exclusive holder. A refusal
names the holder: command, host, pid, since and until when. A killed holder's lease is taken
over by the next run, with a warning naming it. Readers take no lease.

On a local DST the lease is backed by ``flock`` on the lease folder ``DST/.packer-lease`` where
the file system honours it (exclusive for the exclusive lease, shared for tasks): instant on one
host, but nothing depends on it, since some NFS set-ups honour it only within one host. The
last holder out removes the folder.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator

from packer.errors import DatasetBusyError, OutputError
from packer.store.filelock import flocked_where_supported
from packer.store.lease.claim import LEASE_DIR, Lease, busy_error, held_lease, lease_holders
from packer.store.local import LocalStore

__all__ = ["LEASE_DIR", "LOCK_NAME", "dataset_lock"]

#: The flock file of packer 0.2 and 0.3 (``update`` and ``gc``); not written any more, and
#: ignored where an older packer left one.
LOCK_NAME = ".packer-lock"
#: How long to wait for ``flock`` while no live lease names its holder (a killed holder's
#: workers still exiting keep its descriptor open for a moment).
_FLOCK_PATIENCE = 5.0


@contextlib.contextmanager
def dataset_lock(dst: str, what: str, *, command: str | None = None,
                 task: int | None = None) -> Iterator[Lease]:
    """Hold DST's exclusive lease (or array task ``task``'s shared one) while the block runs.

    Args:
        dst: The dataset's directory (created if absent).
        what: What is refused, for the message: ``"update"`` gives "Cannot update '/data/x'".
        command: What holds the lease, as ``dataset_info`` shows it (default: ``what``).
        task: The array task's id, for a shared lease.

    Raises:
        DatasetBusyError: another process holds it; the message names that process.
        OutputError: DST cannot be written (read-only, permissions).
    """
    path = os.path.abspath(dst)
    phrase = f"{what} {path!r}"
    store = LocalStore(path)
    folder = os.path.join(path, LEASE_DIR)
    with contextlib.ExitStack() as stack:
        try:
            os.makedirs(folder, exist_ok=True)
            stack.callback(_remove_if_empty, folder)
            stack.enter_context(flocked_where_supported(folder, shared=task is not None,
                                                        busy=_wait_while_busy(store, phrase)))
            lease = stack.enter_context(held_lease(store, command or what, task=task, what=phrase))
        except OSError as err:
            raise OutputError(f"Cannot write to {path!r}: {err.strerror or err}. Choose a writable "
                              "destination, or fix its permissions and run again.") from err
        yield lease


def _remove_if_empty(folder: str) -> None:
    """The last holder out leaves DST as it found it."""
    with contextlib.suppress(OSError):
        os.rmdir(folder)


def _wait_while_busy(store: LocalStore, phrase: str) -> Callable[[], None]:
    """What to do while another process on this host holds the ``flock``: refuse at once when a
    live lease names it, wait a moment when none does (a killed holder's workers still exiting),
    refuse after :data:`_FLOCK_PATIENCE`."""
    deadline = time.monotonic() + _FLOCK_PATIENCE

    def busy() -> None:
        live = [holder for _, holder in lease_holders(store) if holder.stale_reason() is None]
        if live:
            raise busy_error(phrase, live) from None
        if time.monotonic() > deadline:
            raise DatasetBusyError(f"Cannot {phrase}: another packer process on this host "
                                   "holds its lock. Wait for it to finish, then run this "
                                   "again.") from None
        time.sleep(0.05)

    return busy
