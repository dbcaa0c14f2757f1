"""What every engine shares: the :class:`Engine` protocol, progress records, failures as data.

An engine runs a list of conversion tasks (:class:`~packer.conversion.tasks.Task`) and reports
back through two callbacks: ``on_progress`` gets :class:`Progress` records (files packed and
skipped since the last one, or counts taken back when a task is redone) and ``on_result`` each
finished task's result, which may hand back more tasks. A task's failure travels as the exception
itself (:class:`TaskFailure`) and is raised in the coordinator with where it happened
(:func:`task_error`), the same way whichever engine ran it.
"""

from __future__ import annotations

import errno
import os
import pickle
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

from packer.conversion.tasks import SegmentTask, ShardTask, Task, shard_of
from packer.errors import BadImageError, ConversionError, PackerError, ShardWriteError
from packer.sizes import format_size

__all__ = ["INTERRUPTED", "Engine", "OnProgress", "OnResult", "Progress", "ProgressChannel",
           "ProgressCounter", "TaskFailure", "task_error", "task_key"]


#: The message of the :class:`~packer.errors.ConversionInterrupted` every engine raises on Ctrl-C.
INTERRUPTED: Final = ("Interrupted: the shards finished so far are kept. Run the same conversion "
                      "again with resume=True to finish.")


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


@dataclass(frozen=True)
class TaskFailure:
    """A task's failure on its way from a worker to the coordinator.

    ``error`` is the exception itself: every packer error and ``OSError`` pickles as itself,
    so the coordinator raises the worker's own type. An exception that does not survive a
    pickle round trip (some third-party ones) travels as None; ``trace`` is the worker's
    formatted traceback of anything that is not a packer error or ``OSError`` (a bug).
    """

    error: Exception | None
    trace: str = ""

    @classmethod
    def of(cls, err: Exception, *, crossing: bool = True) -> TaskFailure:
        """The failure to send for ``err``; ``crossing``: it goes to another process, so an
        exception that does not pickle is replaced by its traceback."""
        expected = isinstance(err, (PackerError, OSError))
        trace = "" if expected else "".join(traceback.format_exception(type(err), err, err.__traceback__))
        if crossing:
            try:
                pickle.loads(pickle.dumps(err))
            except Exception:  # whatever fails to pickle, the traceback still says what happened
                return cls(None, trace or "".join(traceback.format_exception(type(err), err,
                                                                             err.__traceback__)))
        return cls(err, trace)


def task_error(task: Task, failure: TaskFailure | Exception) -> Exception:
    """The error to raise in the coordinator for a task's failure, with where it happened.

    A packer error keeps its type and gets a note naming the shard (a :class:`BadImageError`
    already names its file); a write failure (an ``OSError`` or :class:`ShardWriteError`) is a
    :class:`ShardWriteError` naming the shard, the cause (a full disk is told by its errno,
    or by the file system's free space) and the way on; anything else is a bug, a
    :class:`ConversionError` with the worker's traceback.
    """
    if isinstance(failure, Exception):
        failure = TaskFailure.of(failure, crossing=False)
    err, shard = failure.error, shard_of(task)
    where = f"{shard.name} in {shard.dst!r}"
    if isinstance(err, BadImageError):
        return err
    if isinstance(err, ShardWriteError) or (isinstance(err, OSError) and not isinstance(err, PackerError)):
        return _write_error(shard, where, err)
    if isinstance(err, PackerError):
        _add_note(err, f"while packing {where}")
        return err
    return ConversionError(f"A conversion worker failed on {where} (a bug in packer; please "
                           f"report it):\n{failure.trace}")


def _add_note(err: Exception, note: str) -> None:
    """``err.add_note(note)``, also on Python 3.10 (where tracebacks do not show notes)."""
    notes = list(getattr(err, "__notes__", ()))
    setattr(err, "__notes__", [*notes, note])  # what add_note does (3.11+)


def _write_error(shard: ShardTask, where: str, err: OSError) -> ShardWriteError:
    """A shard's failure to be written, worded from its errno (and the file system's room)."""
    code = err.errno
    message = str(err) if isinstance(err, PackerError) else f"{err.strerror or err}"
    full = code in (errno.ENOSPC, errno.EDQUOT)
    # Some storage libraries (LMDB) report a full disk as an I/O error, or with no errno at
    # all: the file system is asked whether the shard still fits.
    room = _room(shard.dst, shard.planned_bytes, certain=full) if full or code in (errno.EIO, None) else None
    cause = (room if room is not None else
             "the disk is full" if full else
             "an I/O error" if code == errno.EIO else
             "the destination is read-only" if code in (errno.EROFS, errno.EACCES, errno.EPERM) else
             "the shard could not be written")
    path = err.path if isinstance(err, ShardWriteError) else str(err.filename or "")
    error = ShardWriteError(f"Writing {where} failed: {cause}: {message.strip()}. Fix it, then run "
                            "the same conversion again with resume=True.", errno=code, path=path)
    error.__cause__ = err
    return error


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
