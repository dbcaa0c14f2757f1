"""DST's lock: ``packer update`` and ``packer gc`` never run at the same time on one dataset.

An update writes shards that no version names yet, and ``gc`` deletes files no kept version
names: run together, ``gc`` would delete the update's work. Each holds an exclusive
``flock`` on ``DST/.packer-lock`` for its whole run. The kernel drops the lock when the process
dies (SIGKILL included), so a killed update never leaves DST locked. Readers take no lock.
(``flock`` is advisory and per host on some NFS setups: run updates of one dataset from one
machine at a time.)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

from packer.errors import DatasetBusyError

__all__ = ["LOCK_NAME", "dataset_lock"]

LOCK_NAME = ".packer-lock"


@contextlib.contextmanager
def dataset_lock(dst: str, what: str) -> Iterator[None]:
    """Hold DST's lock while the block runs (``what``: the command, for the message).

    Raises:
        DatasetBusyError: another process holds it.
    """
    handle = open(os.path.join(dst, LOCK_NAME), "a+b")  # noqa: SIM115 - closed below
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DatasetBusyError(f"Cannot {what} {dst!r}: another `packer update` or `packer gc` is "
                                   "running on it. Wait for it to finish, then run this again.") from None
        yield
    finally:
        handle.close()
