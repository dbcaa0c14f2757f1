"""Stores that wrap another store, for tests: latency and faults in-process, no server needed.

:class:`WrapperStore` passes every call to the store it wraps (as zarr-python's ``WrapperStore``);
:class:`FaultStore` adds a delay per call and injected faults: raise a given exception on the
Nth call of a method, stall those calls, or hand back a body cut short or with a flipped byte. With a
:class:`~packer.store.retrying.RetryPolicy` it retries as a remote store does, through the same
:func:`~packer.store.retrying.retry` and classification, so an injected fault plays a flaky
client's part::

    store = FaultStore(LocalStore(dataset), policy=RetryPolicy(retries=3, base=0.001))
    store.inject("read_range", ConnectionResetError(104, "reset"), count=2, match="shard-")
    store.truncate(count=1, match="shard-")
    ShardSet(store, cache=NodeCache(tmp), mode="ranged").read(0)   # retried, then exact

Faults are counted per process; a store pickles with its faults and counts (workers get a copy).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from packer.store.base import Store
from packer.store.retrying import RetryPolicy, retry

__all__ = ["FaultStore", "WrapperStore"]

T = TypeVar("T")

#: The methods a fault may target: every call a reader or writer makes to a store.
METHODS = ("stat", "read", "read_range", "sizes", "put", "put_if_absent", "put_file", "list", "delete")


class WrapperStore(Store):
    """Every call passed to ``inner``; a subclass overrides what it changes."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner.url)
        self.inner = inner
        self.is_local = inner.is_local
        self.read_only = inner.read_only

    def describe(self, key: str = "") -> str:
        return self.inner.describe(key)

    def local_path(self, key: str) -> str | None:
        return self.inner.local_path(key)

    def stat(self, key: str) -> int:
        return self.inner.stat(key)

    def read(self, key: str) -> bytes:
        return self.inner.read(key)

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        return self.inner.read_range(key, start, stop)

    def sizes(self, keys: Sequence[str]) -> dict[str, int | None]:
        return self.inner.sizes(keys)

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self.inner.put_if_absent(key, data)

    def put_file(self, key: str, path: str) -> None:
        self.inner.put_file(key, path)

    def list(self, prefix: str = "") -> dict[str, int]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def options(self) -> Mapping[str, Any]:
        return self.inner.options()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


@dataclass
class _Fault:
    """Calls ``first`` .. ``first + count - 1`` of ``method`` on keys containing ``match``."""

    method: str
    first: int
    count: int
    match: str
    error: BaseException | Callable[[], BaseException] | None = None
    mangle: Callable[[bytes], bytes] | None = None
    pause: float = 0.0
    seen: int = 0

    def fires(self, method: str, key: str) -> bool:
        """Count a call; whether this fault applies to it."""
        if method != self.method or self.match not in key:
            return False
        self.seen += 1
        return self.first <= self.seen < self.first + self.count


def _cut(data: bytes) -> bytes:
    return data[:len(data) // 2]


def _flip(data: bytes) -> bytes:
    if not data:
        return data
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]


class FaultStore(WrapperStore):
    """``inner`` seen as a remote store: ``latency`` seconds per call, injected faults, and
    retries under ``policy`` (none without one). It never offers a local path, so readers
    fetch through the cache as they do from a URL. ``calls`` counts each method's calls."""

    def __init__(self, inner: Store, *, latency: float = 0.0, policy: RetryPolicy | None = None) -> None:
        super().__init__(inner)
        self.is_local = False
        self.latency = latency
        self.policy = policy
        self.calls: Counter[str] = Counter()
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # -- faults ---------------------------------------------------------------------------

    def inject(self, method: str, error: BaseException | Callable[[], BaseException], *, on_call: int = 1,
               count: int = 1, match: str = "") -> None:
        """Raise ``error`` (an exception, or a callable that makes a fresh one) from calls
        ``on_call`` .. ``on_call + count - 1`` (1-based) of ``method`` on keys containing ``match``."""
        self._add(_Fault(_checked(method), on_call, count, match, error=error))

    def truncate(self, *, method: str = "read_range", on_call: int = 1, count: int = 1,
                 match: str = "") -> None:
        """Hand back the first half of the body, as a transfer cut short does (the caller must notice)."""
        self._add(_Fault(_checked(method, reads=True), on_call, count, match, mangle=_cut))

    def corrupt(self, *, method: str = "read_range", on_call: int = 1, count: int = 1,
                match: str = "") -> None:
        """Hand back the body with its middle byte flipped (the caller's digest must notice)."""
        self._add(_Fault(_checked(method, reads=True), on_call, count, match, mangle=_flip))

    def stall(self, seconds: float, *, method: str = "read_range", on_call: int = 1, count: int = 1,
              match: str = "") -> None:
        """Wait ``seconds`` before answering those calls (a server that hangs mid-request)."""
        self._add(_Fault(_checked(method), on_call, count, match, pause=seconds))

    def clear(self) -> None:
        """Drop every fault not yet spent."""
        with self._lock:
            self._faults.clear()

    def _add(self, fault: _Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def _call(self, method: str, key: str, call: Callable[[], T]) -> T:
        """``call()`` with this store's latency and faults, retried under ``policy``."""
        def attempt() -> T:
            with self._lock:
                self.calls[method] += 1
                fired = [fault for fault in self._faults if fault.fires(method, key)]
            pause = self.latency + sum(fault.pause for fault in fired)
            if pause:
                time.sleep(pause)
            for fault in fired:
                if fault.error is not None:
                    raise fault.error() if callable(fault.error) else fault.error
            result = call()
            for fault in fired:
                if fault.mangle is not None:
                    result = fault.mangle(result)  # type: ignore[arg-type, assignment]
            return result

        return attempt() if self.policy is None else retry(attempt, self.describe(key), self.policy)

    # -- the Store interface ------------------------------------------------------------

    def local_path(self, key: str) -> str | None:
        return None

    def stat(self, key: str) -> int:
        return self._call("stat", key, lambda: self.inner.stat(key))

    def read(self, key: str) -> bytes:
        return self._call("read", key, lambda: self.inner.read(key))

    def read_range(self, key: str, start: int, stop: int) -> bytes:
        return self._call("read_range", key, lambda: self.inner.read_range(key, start, stop))

    def read_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        return [self.read_range(key, start, stop) for start, stop in ranges]

    def sizes(self, keys: Sequence[str]) -> dict[str, int | None]:
        return self._call("sizes", ",".join(keys), lambda: self.inner.sizes(keys))

    def put(self, key: str, data: bytes) -> None:
        self._call("put", key, lambda: self.inner.put(key, data))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self._call("put_if_absent", key, lambda: self.inner.put_if_absent(key, data))

    def put_file(self, key: str, path: str) -> None:
        self._call("put_file", key, lambda: self.inner.put_file(key, path))

    def list(self, prefix: str = "") -> dict[str, int]:
        return self._call("list", prefix, lambda: self.inner.list(prefix))

    def delete(self, key: str) -> None:
        self._call("delete", key, lambda: self.inner.delete(key))


def _checked(method: str, *, reads: bool = False) -> str:
    """``method``, refused when a fault cannot target it."""
    allowed = ("read", "read_range") if reads else METHODS
    if method not in allowed:
        raise ValueError(f"a fault cannot target {method!r}; choose one of {', '.join(allowed)}")
    return method
