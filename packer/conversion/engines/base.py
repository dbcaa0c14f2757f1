"""What every engine shares: the :class:`Engine` protocol, progress records, failures as data.

An engine runs a list of conversion tasks (:class:`~packer.conversion.tasks.Task`) and reports
back through two callbacks: ``on_progress`` gets :class:`Progress` records (files packed and
skipped since the last one, or counts taken back when a task is redone) and ``on_result`` each
finished task's result, which may hand back more tasks. A task's failure travels as plain data
(:func:`describe_error`) and is worded in the coordinator (:func:`task_error`), the same way
whichever engine ran it.
"""

from __future__ import annotations

import errno
import os
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from packer.conversion.tasks import SegmentTask, Task, shard_of
from packer.errors import BadImageError, ConversionError, OutputError, PackerError, SourceError
from packer.sizes import format_size

__all__ = ["Engine", "OnProgress", "OnResult", "Progress", "ProgressChannel", "ProgressCounter",
           "describe_error", "task_error", "task_key"]


@dataclass(frozen=True, slots=True)
class Progress:
    """Files a task packed and skipped since its last report.

    ``retracted`` counts are taken back: the task is being redone (after a decoder crash, or a
    retry elsewhere) and will report them again.
    """

    packed: int
    skipped: int
    retracted: bool = False


#: Receives each :class:`Progress` record, in the coordinator.
OnProgress = Callable[[Progress], None]
#: Called with each finished task's result; may return more tasks to run.
OnResult = Callable[[Any], Iterable[Task]]


@runtime_checkable
class Engine(Protocol):
    """Runs conversion tasks; ``parallelism`` is how many run at once (for splitting work)."""

    name: str

    @property
    def parallelism(self) -> int:
        """Tasks that run at the same time."""

    def run(self, tasks: list[Task], *, on_progress: OnProgress, on_result: OnResult) -> None:
        """Run ``tasks``, reporting progress and handing each result to ``on_result``.

        Raises:
            ConversionInterrupted: Ctrl-C (tasks still running are stopped or cancelled).
            PackerError: a task failed; see :func:`task_error`.
        """


class ProgressCounter:
    """The ``notify`` a task gets: counts ``packed``/``skipped`` files and sends them now and then.

    ``send`` gets a :class:`Progress` at most every ``every`` seconds (a message per file would
    cost the coordinator a core); ``on_file``, if given, sees each file before it is read.
    """

    def __init__(self, send: Callable[[Progress], None] | None, *, every: float,
                 on_file: Callable[[str], None] | None = None) -> None:
        self._send, self._every, self._on_file = send, every, on_file
        self._packed = self._skipped = 0
        self._sent = time.monotonic()

    def __call__(self, event: str, relpath: str) -> None:
        if event == "file":
            if self._on_file is not None:
                self._on_file(relpath)
            return
        if event == "packed":
            self._packed += 1
        elif event == "skipped":
            self._skipped += 1
        else:
            return
        if time.monotonic() - self._sent >= self._every:
            self.flush()

    def flush(self) -> None:
        """Send what was counted since the last report, if anything."""
        if self._send is not None and (self._packed or self._skipped):
            self._send(Progress(self._packed, self._skipped))
        self._packed = self._skipped = 0
        self._sent = time.monotonic()


def task_key(task: Task) -> str:
    """A task's name in progress messages: the shard file, and the segment if any."""
    if isinstance(task, SegmentTask):
        return f"{task.shard.name}#{task.segment}"
    return task.name


class ProgressChannel(Protocol):
    """Carries per-file counts from remote tasks back to the coordinator's progress bar."""

    def reporter(self, key: str) -> Callable[[int, int], None]:
        """In the worker: a function taking ``(packed, skipped)`` counts since its last call.

        The channel object is pickled to the worker, so it must hold no live connection.
        """

    def drain(self) -> list[tuple[str, int, int]]:
        """In the coordinator: the ``(key, packed, skipped)`` reports received since last time."""


def describe_error(err: Exception) -> tuple[str, str, str, str]:
    """A task's failure as plain data for :func:`task_error`: ``(kind, message, path, reason)``.

    Exceptions do not always unpickle in another process (keyword-only fields), and the
    coordinator needs the task to word the message, so workers send this instead. Call it
    inside the ``except`` block: a bug keeps its traceback.
    """
    if isinstance(err, BadImageError):
        return ("bad_image", str(err), err.path, err.reason)
    if isinstance(err, PackerError):
        return (type(err).__name__, str(err), "", "")
    if isinstance(err, OSError):
        return ("OSError", f"{err.strerror or err} [errno {err.errno}]", str(err.filename or ""),
                errno.errorcode.get(err.errno or 0, ""))
    return ("bug", traceback.format_exc(), "", "")


def task_error(task: Task, kind: str, message: str, path: str, reason: str) -> PackerError:
    """Rebuild a worker's error in the coordinator, with the shard and the way to go on.

    ``kind`` is the error's class name (or ``bad_image``/``bug``), ``reason`` an errno name.
    """
    shard = shard_of(task)
    where = f"{shard.name} in {shard.dst!r}"
    if kind == "bad_image":
        return BadImageError(message, path=path, reason=reason)
    if kind == "SourceError":
        return SourceError(message)
    if kind in ("OSError", "ShardError"):
        full = reason == "ENOSPC" or "No space left" in message
        io_error = reason == "EIO" or "Input/output error" in message
        room = _room(shard.dst, shard.planned_bytes, certain=full) if full or io_error else None
        cause = (room if room is not None else
                 "the disk is full" if full else
                 "an I/O error" if io_error else
                 "the destination is read-only" if reason in ("EROFS", "EACCES", "EPERM") else
                 "the shard could not be written")
        return OutputError(f"Writing {where} failed: {cause}: {message.strip()}. Fix it, then run "
                           "the same command with --resume.")
    if kind == "bug":
        return ConversionError(f"A conversion worker failed on {where} (a bug in packer; please "
                               f"report it):\n{message}")
    return ConversionError(f"{kind} while writing {where}: {message}")


def _room(dst: str, needed: int, *, certain: bool) -> str | None:
    """"the disk is full: ..." with the free and needed bytes, when the error says so
    (``certain``: ENOSPC) or DST's file system has less room than the shard needs (LMDB reports a
    full disk as an I/O error); else None, as when the file system cannot be asked."""
    try:
        stats = os.statvfs(dst)
    except OSError:
        return None
    free = stats.f_bavail * stats.f_frsize
    if free >= needed and not certain:
        return None
    return (f"the disk is full: {format_size(free)} free on the file system of {dst!r}, and the "
            f"shard needs about {format_size(needed)}")
