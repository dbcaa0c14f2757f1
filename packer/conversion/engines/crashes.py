"""Pin a decoder crash on its file when the task runs on an executor (Dask, a process pool).

The local engine sees which file a dead worker was on (shared memory). A remote worker that a
decoder kills (a segfault in a codec library) takes that knowledge with it, and the executor
runs the task again (Dask retries it; :class:`~packer.conversion.engines.executor.ExecutorEngine`
resubmits it to a fresh process pool), which crashes again. So a task on an executor leaves a
*breadcrumb* next to its staging files: before each file it overwrites one small record (one
``pwrite``) with the file's path, how many attempts have reached it and the worker's pid. The
next attempt reads the record of the one that died: a file reached by :data:`CRASHES_TO_PIN`
attempts that all died there is skipped as ``decode_error`` (named in the error under
``strict``), as the local engine does. One death is not enough: a worker may be lost for other
reasons (a node preempted), and then the file is simply tried again.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from typing import Final

from packer.conversion.tasks import Task, shard_of
from packer.errors import BadImageError

__all__ = ["CRASHES_TO_PIN", "Breadcrumb", "Trail", "pin_crashes"]

#: Attempts that must die on the same file before it is skipped.
CRASHES_TO_PIN: Final = 2
_RECORD_BYTES = 4096


@dataclass(frozen=True)
class Trail:
    """What a breadcrumb says: the file an attempt was on, the attempts that reached it (this
    one included), and the process that made it."""

    file: str
    attempts: int
    pid: int


class Breadcrumb:
    """The file a task is on, in ``<staging>/.current-<key>``, kept across its attempts."""

    def __init__(self, staging: str, key: str) -> None:
        self.path = os.path.join(staging, f".current-{key.replace('/', '_')}")
        self._fd: int | None = None
        self._last: tuple[str, int] | None = None

    def previous(self) -> Trail | None:
        """The trail an earlier attempt left, if it died on the way (else None)."""
        try:
            with open(self.path, "rb") as handle:
                text = handle.read(_RECORD_BYTES).rstrip(b"\0 ").decode("utf-8", "surrogateescape")
            data = json.loads(text)
            return Trail(str(data["file"]), int(data["attempts"]), int(data.get("pid", 0)))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def reached(self, relpath: str, before: Trail | None) -> None:
        """Record that this attempt now reads ``relpath`` (one write, no fsync: the record only
        has to outlive this process, not the machine)."""
        attempts = before.attempts + 1 if before is not None and before.file == relpath else 1
        record = json.dumps({"file": relpath, "attempts": attempts, "pid": os.getpid()}
                            ).encode("utf-8", "surrogateescape")
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.pwrite(self._fd, record[:_RECORD_BYTES].ljust(_RECORD_BYTES, b" "), 0)

    def clear(self) -> None:
        """The attempt ended (done, failed with an error, or stopped through no fault of its
        file): nothing to pin."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def pin_crashes(task: Task, before: Trail | None) -> Task:
    """``task``, with the file earlier attempts died on skipped, if they died there often enough.

    Raises:
        BadImageError: under ``strict``, naming the file (as the local engine does).
    """
    if before is None or before.attempts < CRASHES_TO_PIN:
        return task
    relpath, attempts = before.file, before.attempts
    detail = (f"the decoder crashed the worker process ({attempts} attempts of the task died on "
              "this file)")
    shard = shard_of(task)
    if shard.strict:
        raise BadImageError(f"{shard.reader.where(relpath)!r} cannot be packed: decode_error "
                            f"({detail}). Fix or remove the file, or convert without strict=True to "
                            "skip and list it.", path=relpath, reason="decode_error")
    return task.with_crash(relpath, detail)
