"""The process that renews a held lease while its holder works.

Renewal runs in a small forked process, not in a thread: a conversion's coordinator starts its
workers with ``fork`` only while it runs a single thread (:mod:`packer.conversion.engines.local`),
and a thread that renews a lease would make every conversion start its workers the slow way.
The keeper dies with its holder (``PR_SET_PDEATHSIG``; a holder killed with SIGKILL leaves a lease
that expires, or that this host sees as gone at once), is stopped with SIGTERM (no descriptor
its holder's other children might inherit keeps it waiting), ignores Ctrl-C (its holder handles
that and stops it), and stops renewing, for good, as soon as the lease is no longer its holder's or
is about to expire: renewing a lease someone may already have taken over would be a lie. Its
holder learns that at its next :meth:`~packer.store.lease.claim.Lease.check`.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import os
import signal
import time
from typing import Any

from packer.errors import ObjectNotFoundError, PackerError
from packer.store.base import Store
from packer.store.lease.holder import LeaseHolder

__all__ = ["Keeper"]

_PR_SET_PDEATHSIG = 1
#: Seconds a keeper may take to notice it was stopped (it may be inside a store call).
_STOP_PATIENCE = 5.0


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (ValueError, OSError):
        return 4096


class _Stop(Exception):
    """Raised in the keeper by the signal its holder stops it with."""


class Keeper:
    """A running keeper process; :meth:`stop` ends it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._running = True

    @classmethod
    def start(cls, store: Store, key: str, holder: LeaseHolder, *, ttl: float, every: float) -> Keeper:
        """Fork a process that renews ``key`` (holding ``holder``) every ``every`` seconds for
        ``ttl`` seconds more."""
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; coverage does not follow a fork
            try:
                # Only the standard streams: an inherited flock or connection must not outlive
                # what its holder does with it.
                os.closerange(3, _max_fd())
                _keep(store, key, holder, ttl=ttl, every=every, parent=parent)
            except _Stop:
                pass
            finally:
                os._exit(0)
        return cls(pid)

    def stop(self) -> None:
        """End the keeper and wait for it (it renews nothing after this returns)."""
        if not self._running:
            return
        self._running = False
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)  # raises _Stop in the keeper, wherever it is
        deadline = time.monotonic() + _STOP_PATIENCE
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:  # stuck in a system call: no renewal after this
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
                    break
                time.sleep(0.002)


def _stop(signum: int, frame: Any) -> None:  # pragma: no cover - runs in the forked keeper
    raise _Stop


def _keep(store: Store, key: str, holder: LeaseHolder, *, ttl: float, every: float,
          parent: int) -> None:  # pragma: no cover - runs in the forked keeper
    """The keeper's loop: renew until stopped, or until renewing is no longer safe."""
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the holder died before the line above
        return
    store = copy.copy(store)  # a remote store makes its own client here: none crosses the fork
    margin = min(1.0, ttl / 10)
    while True:
        time.sleep(every)
        try:
            current = LeaseHolder.from_bytes(store.read(key))
        except ObjectNotFoundError:
            return  # taken over and released: not ours any more
        except (PackerError, OSError):
            continue  # the store stumbled: try again at the next tick, while time is left
        if current is None or current.token != holder.token or time.time() >= current.expires - margin:
            return
        with contextlib.suppress(PackerError, OSError):
            store.put(key, current.renewed(ttl).to_bytes())
