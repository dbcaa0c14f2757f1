"""``flock`` on a node-local file or folder: the one way packer takes a lock between processes.

The kernel drops an ``flock`` when its holder dies (however it dies), so a killed process never
leaves a lock behind. Used by the node cache (its entries and byte count), the archive spool
(one decompression per node) and DST's lease folder (instant on one host). Some file systems
(NFS without lock support, FUSE) refuse ``flock``: :func:`flocked_where_supported` then runs
its block unlocked, for callers whose lock is only a fast path over another one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Callable, Iterator
from typing import Final

__all__ = ["flocked", "flocked_where_supported", "try_flocked"]

#: What ``flock`` fails with where the file system does not support it.
_UNSUPPORTED: Final = frozenset({errno.EBADF, errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})


def _lock(fd: int, *, shared: bool, blocking: bool) -> bool:
    """``flock`` ``fd``; False when ``blocking`` is off and another process holds a conflicting lock."""
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        fcntl.flock(fd, mode if blocking else mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def flocked(path: str, *, shared: bool = False) -> Iterator[int]:
    """Hold an ``flock`` on the file ``path`` (created if missing) for the block, waiting for it;
    exclusive, or ``shared``. Yields the open descriptor (the caller may read and write it).

    Raises:
        OSError: ``path`` cannot be opened or created, or cannot be locked.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        _lock(fd, shared=shared, blocking=True)
        yield fd
    finally:
        os.close(fd)


def try_flocked(path: str, stack: contextlib.ExitStack) -> bool:
    """Take an exclusive ``flock`` on the file ``path`` (created if missing) without waiting,
    held until ``stack`` closes; False (nothing held) when another holder has it.

    Raises:
        OSError: ``path`` cannot be opened or created, or cannot be locked.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    if not _lock(fd, shared=False, blocking=False):
        os.close(fd)
        return False
    stack.callback(os.close, fd)
    return True


@contextlib.contextmanager
def flocked_where_supported(path: str, *, shared: bool = False,
                            busy: Callable[[], None]) -> Iterator[None]:
    """Hold an ``flock`` on the existing file or folder ``path`` for the block, where the file
    system allows it; where it does not (``path`` cannot be opened, or ``flock`` is not
    supported), the block runs unlocked. The lock is tried without waiting in the kernel:
    ``busy()`` is called each time another process holds it, and either returns (after a pause,
    to try again) or raises to give up.

    Raises:
        Whatever ``busy`` raises; OSError: ``flock`` failed for another reason than support.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        yield
        return
    try:
        while True:
            try:
                if _lock(fd, shared=shared, blocking=False):
                    break
            except OSError as err:
                if err.errno not in _UNSUPPORTED:
                    raise
                break
            busy()
        yield
    finally:
        os.close(fd)
