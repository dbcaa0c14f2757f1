"""Who holds a lease: the record a lease key holds, and when that record is stale.

A record is a small JSON object: ``host``, ``pid``, ``command`` (what holds it: ``update``,
``convert task 3``, ...), a random ``token``, ``acquired`` and ``expires`` (seconds since the
epoch, UTC) and ``machine``, which tells whether ``pid`` can be checked from here: the kernel's
boot id and the PID namespace, so that two containers sharing a host name never judge each
other's processes.

A record is stale when it expired (its holder stopped renewing it: killed, or cut off from the
store), or at once when its holder ran on this machine and its process is gone. Host clocks
must agree to within a small fraction of the lease's time to live (NTP does).
"""

from __future__ import annotations

import functools
import json
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass, replace
from typing import Any

__all__ = ["LeaseHolder", "format_age", "format_time", "this_machine"]


@functools.lru_cache(maxsize=1)
def this_machine() -> str:
    """This kernel's boot id and PID namespace (``""`` where Linux does not say)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return ""
    return f"{boot}/{namespace}"


def _process_gone(pid: int) -> bool:
    """Whether no process ``pid`` runs on this machine (a zombie still counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: alive
        return False
    return False


def format_time(seconds: float) -> str:
    """``2025-05-01 12:00:03 UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def format_age(seconds: float) -> str:
    """``42 s``, ``3 min``, ``2.5 h``, ``4 days``."""
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


@dataclass(frozen=True)
class LeaseHolder:
    """One lease record; see the module docstring."""

    host: str
    pid: int
    command: str
    token: str
    acquired: float
    expires: float
    machine: str = ""

    @classmethod
    def new(cls, command: str, ttl: float) -> LeaseHolder:
        """A record for this process, valid for ``ttl`` seconds from now."""
        now = time.time()
        return cls(socket.gethostname(), os.getpid(), command, uuid.uuid4().hex, now, now + ttl,
                   this_machine())

    def renewed(self, ttl: float) -> LeaseHolder:
        """This record, valid for ``ttl`` seconds from now."""
        return replace(self, expires=time.time() + ttl)

    def to_bytes(self) -> bytes:
        """The record as the lease key holds it."""
        return (json.dumps(asdict(self), sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> LeaseHolder | None:
        """The record in ``data``, or ``None`` where it is not one."""
        try:
            raw = json.loads(data.decode("utf-8"))
            return cls(str(raw["host"]), int(raw["pid"]), str(raw["command"]), str(raw["token"]),
                       float(raw["acquired"]), float(raw["expires"]), str(raw.get("machine", "")))
        except (UnicodeDecodeError, ValueError, TypeError, KeyError):
            return None

    def stale_reason(self, now: float | None = None) -> str | None:
        """Why this record no longer holds its lease (``None`` while it does)."""
        now = time.time() if now is None else now
        if self.machine and self.machine == this_machine() and _process_gone(self.pid):
            return f"its process {self.pid} on this host is gone"
        if now > self.expires:
            return f"it expired {format_age(now - self.expires)} ago"
        return None

    def describe(self) -> str:
        """``update by host node7 pid 4242 since 2025-05-01 12:00:03 UTC (lease until ...)``."""
        return (f"{self.command} by host {self.host} pid {self.pid} since {format_time(self.acquired)} "
                f"(lease until {format_time(self.expires)})")

    def as_dict(self, now: float | None = None) -> dict[str, Any]:
        """What ``dataset_info`` shows: the record, and whether and why it is stale."""
        reason = self.stale_reason(now)
        return {"command": self.command, "host": self.host, "pid": self.pid,
                "since": format_time(self.acquired), "until": format_time(self.expires),
                "stale": reason is not None, "stale_reason": reason or ""}
