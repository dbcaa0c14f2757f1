"""The last bound a reader set on a node cache, kept in the cache so `packer cache info` can say it.

A cache's bound is not a property of the directory: each reading process passes its own
(``cache_limit=``) and eviction honours it. Each process records the bound it reads under once,
in ``<cache>/v1/bound.json`` (host, pid, time), so an operator sees what was last in force.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Final

from packer.store.durable import atomic_write_bytes

__all__ = ["LastBound", "read_last_bound", "record_bound"]

_NAME: Final = "bound.json"
_recorded: set[tuple[int, str, int | None, int]] = set()
_lock = threading.Lock()


@dataclass(frozen=True)
class LastBound:
    """The bound a reading process last set: ``limit`` bytes (None: no bound, only the floor),
    ``min_free`` bytes kept free, by ``pid`` on ``host`` at ``since`` (epoch seconds)."""

    limit: int | None
    min_free: int
    host: str
    pid: int
    since: float


def record_bound(folder: str, limit: int | None, min_free: int) -> None:
    """Write ``folder/bound.json`` once per process and bound; a failure to write is ignored
    (the record is for people, eviction never reads it)."""
    key = (os.getpid(), folder, limit, min_free)
    with _lock:
        if key in _recorded:
            return
        _recorded.add(key)
    record = {"limit": limit, "min_free": min_free, "host": socket.gethostname(),
              "pid": os.getpid(), "since": time.time()}
    try:
        atomic_write_bytes(os.path.join(folder, _NAME), json.dumps(record).encode())
    except OSError:
        pass


def read_last_bound(folder: str) -> LastBound | None:
    """The record in ``folder``, or None when there is none or it cannot be read."""
    try:
        with open(os.path.join(folder, _NAME), "rb") as f:
            record = json.loads(f.read(4096))
        limit = record["limit"]
        return LastBound(None if limit is None else int(limit), int(record["min_free"]),
                         str(record["host"]), int(record["pid"]), float(record["since"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
