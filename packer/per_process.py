"""One resource per process: made on first use in each process, never inherited across a fork.

A client, an open file, a thread pool or a lock made in one process must not be used by a
child it forks (a DataLoader worker): the child shares the parent's descriptors and
connections, has none of its threads, and may inherit a lock that one of them held. A
:class:`PerProcess` holds a factory and the resource it made, keyed by the pid that made it:
a process that finds another pid's resource makes its own, and the parent keeps its one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["PerProcess"]

T = TypeVar("T")

#: Guards replacing an instance's lock after a fork (itself replaced in every forked child).
_GUARD = threading.Lock()


def _new_guard_after_fork() -> None:
    global _GUARD
    _GUARD = threading.Lock()


os.register_at_fork(after_in_child=_new_guard_after_fork)


class PerProcess(Generic[T]):
    """``factory()``'s result, made once in each process that asks for it (see the module doc).

    Threads of one process racing to the first :meth:`get` make it once. A resource that needs
    a lock for its use carries one (made by ``factory``, so a child's is new too). Pickles as a
    new, empty one with the same factory (which must pickle: a function or a bound method).
    """

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._made: tuple[int, T] | None = None  # (pid, resource): read and written in one step
        self._lock: tuple[int, threading.Lock] = (os.getpid(), threading.Lock())

    def get(self) -> T:
        """This process's resource, made now if this process has none."""
        pid = os.getpid()
        made = self._made
        if made is not None and made[0] == pid:
            return made[1]
        with self._lock_here(pid):
            made = self._made
            if made is None or made[0] != pid:
                made = self._made = (pid, self._factory())
            return made[1]

    def current(self) -> T | None:
        """This process's resource, or None when it has made none (or :meth:`clear` dropped it)."""
        made = self._made
        return made[1] if made is not None and made[0] == os.getpid() else None

    def clear(self) -> T | None:
        """Forget the resource, so the next :meth:`get` makes a new one; returns this process's
        (for the caller to close), or None when it had none (a parent's is never returned)."""
        made, self._made = self._made, None
        return made[1] if made is not None and made[0] == os.getpid() else None

    def _lock_here(self, pid: int) -> threading.Lock:
        """This process's lock for making the resource: never one a parent's thread held at a fork."""
        held = self._lock
        if held[0] == pid:
            return held[1]
        with _GUARD:
            if self._lock[0] != pid:
                self._lock = (pid, threading.Lock())
            return self._lock[1]

    def __getstate__(self) -> dict[str, Any]:
        return {"factory": self._factory}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["factory"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"PerProcess({self._factory!r})"
