"""Run conversion tasks in worker processes, one task per worker at a time.

A task writes a whole shard (:class:`ShardTask`) or, when there are fewer shards than workers,
packs one segment of a shard (:class:`SegmentTask`). Each worker is a long-lived process fed
one task at a time over its own pipe, and writes the file it is on into shared memory, so the
coordinator always knows which shard, and which file, every worker is on. That is what makes failures precise:

* a worker that dies by a signal other than SIGKILL (a decoder segfault or abort) is blamed on
  the file it was reading: that file is skipped as ``decode_error`` (or, under ``strict``,
  named in the error) and the shard is redone without it by a fresh worker;
* a worker killed by SIGKILL (the out-of-memory killer, an operator) ends the run with an error
  naming the shard and file;
* an error inside a worker (disk full, unreadable source, a bad file under ``strict``) ends the
  run with that error; shards already renamed into DST stay for ``--resume``.

Workers start with ``fork`` when the coordinator runs a single thread (the command line; the
fork handler closes any open shard readers first) and with ``spawn`` otherwise, so no lock held
by another thread is ever inherited. They die with the coordinator (``PR_SET_PDEATHSIG`` on
Linux) and ignore SIGINT, which only the coordinator handles.
"""

from __future__ import annotations

import ctypes
import errno
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from packer.errors import (
    BadImageError,
    ConversionError,
    ConversionInterrupted,
    OutputError,
    PackerError,
    SourceError,
)
from packer.conversion.tasks import SegmentTask, ShardTask

__all__ = ["START_METHOD", "OnResult", "describe_error", "run_shard_tasks", "task_error"]

#: How worker processes start. None picks "fork" when this process runs a single thread on
#: Linux (fast, and safe without other threads) and "spawn" otherwise; tests set "fork" to
#: inject faults by monkeypatching.
START_METHOD: str | None = None


def _start_method() -> str:
    if START_METHOD is not None:
        return START_METHOD
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return "fork"
    return "spawn"

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: orphans exit when their pipe closes
        pass


#: Longest relative path kept in a worker's "current file" slot (longer ones are cut).
_CURRENT_BYTES = 4096
#: How often a worker reports progress (a message per file would cost the coordinator a core).
_PROGRESS_EVERY = 0.1


class _Reporter:
    """The worker's side of progress: counts, sent in batches, and the file it is on.

    The current file lives in shared memory, not in messages, so the coordinator can name
    the file a crashed worker was decoding at no cost per file.
    """

    def __init__(self, conn: Connection, current: Any) -> None:
        self._conn, self._current = conn, current
        self._packed = self._skipped = 0
        self._sent = time.monotonic()

    def __call__(self, event: str, relpath: str) -> None:
        if event == "file":
            self._current.value = relpath.encode("utf-8", "surrogateescape")[:_CURRENT_BYTES - 1]
            return
        if event == "packed":
            self._packed += 1
        else:
            self._skipped += 1
        if time.monotonic() - self._sent >= _PROGRESS_EVERY:
            self.flush()

    def flush(self) -> None:
        if self._packed or self._skipped:
            self._conn.send(("progress", f"{self._packed} {self._skipped}"))
            self._packed = self._skipped = 0
        self._sent = time.monotonic()


def _worker_main(conn: Connection, current: Any) -> None:
    """Loop: receive a task, write the shard, send progress and the result back."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        current.value = b""
        report = _Reporter(conn, current)
        try:
            result = task.run(report)
            report.flush()
        except Exception as err:  # every failure goes back as data; see describe_error
            conn.send(("error", *describe_error(err)))
        else:
            conn.send(("result", result))


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


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT while starting a worker: it inherits that, even across exec (spawn)."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals cannot be changed here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


Task = ShardTask | SegmentTask
#: Called with each finished task's result; may return more tasks to run.
OnResult = Callable[[Any], Iterable[Task]]


@dataclass
class _Slot:
    process: multiprocessing.process.BaseProcess
    conn: Connection
    current_file: Any
    task: Task | None = None
    packed: int = 0
    skipped: int = 0


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def task_error(task: Task, kind: str, message: str, path: str, reason: str) -> PackerError:
    """Rebuild a worker's error in the coordinator, with the shard and the way to go on.

    ``kind`` is the error's class name (or ``bad_image``/``bug``), ``reason`` an errno name.
    """
    where = f"{task.shard.name} in {task.shard.dst!r}"
    if kind == "bad_image":
        return BadImageError(message, path=path, reason=reason)
    if kind == "SourceError":
        return SourceError(message)
    if kind in ("OSError", "ShardError"):
        full = reason == "ENOSPC" or "No space left" in message
        io_error = reason == "EIO" or "Input/output error" in message
        cause = ("the disk is full" if full else
                 "an I/O error (LMDB reports a full disk this way too)" if io_error else
                 "the destination is read-only" if reason in ("EROFS", "EACCES", "EPERM") else
                 "the shard could not be written")
        return OutputError(f"Writing {where} failed: {cause}: {message.strip()}. Fix it, then run "
                           "the same command with --resume.")
    if kind == "bug":
        return ConversionError(f"A conversion worker failed on {where} (a bug in packer; please "
                               f"report it):\n{message}")
    return ConversionError(f"{kind} while writing {where}: {message}")


class _Pool:
    """The coordinator's view of the workers; see the module docstring."""

    def __init__(self, workers: int, on_event: Callable[[str, str], None]) -> None:
        self._context: Any = multiprocessing.get_context(_start_method())
        self._slots: list[_Slot] = []
        self._on_event = on_event
        for _ in range(workers):
            self._slots.append(self._start())

    def _start(self) -> _Slot:
        parent, child = self._context.Pipe()
        current = self._context.RawArray(ctypes.c_char, _CURRENT_BYTES)
        process = self._context.Process(target=_worker_main, args=(child, current), daemon=True,
                                        name="packer-convert-worker")
        with _sigint_ignored():  # a Ctrl-C while the worker boots must not print its traceback
            process.start()
        child.close()
        return _Slot(process, parent, current)

    def run(self, tasks: Iterable[Task], on_result: OnResult) -> None:
        pending = deque(tasks)
        while pending or any(slot.task for slot in self._slots):
            for slot in self._slots:
                if slot.task is None and pending:
                    slot.task, slot.packed, slot.skipped = pending.popleft(), 0, 0
                    slot.conn.send(slot.task)
            waitables: list[Any] = [s.conn for s in self._slots] + [s.process.sentinel for s in self._slots]
            ready = wait(waitables)
            for index, slot in enumerate(list(self._slots)):
                if slot.conn in ready or slot.process.sentinel in ready:
                    self._drain(slot, on_result, pending)
                if slot.process.sentinel in ready or not slot.process.is_alive():
                    retry = self._died(slot)
                    self._slots[index] = self._start()
                    if retry is not None:
                        pending.appendleft(retry)

    def _drain(self, slot: _Slot, on_result: OnResult, pending: deque[Task]) -> None:
        while slot.conn.poll():
            try:
                message = slot.conn.recv()
            except (EOFError, OSError):
                return
            kind = message[0]
            if kind == "result":
                slot.task = None
                pending.extend(on_result(message[1]))
            elif kind == "error":
                if slot.task is None:
                    raise ConversionError(f"worker error outside a task: {message[2]}")
                raise task_error(slot.task, *message[1:])
            elif kind == "progress":
                packed, skipped = (int(x) for x in message[1].split())
                slot.packed += packed
                slot.skipped += skipped
                self._on_event(kind, message[1])

    def _died(self, slot: _Slot) -> Task | None:
        """Handle a dead worker; return its task to redo, if the death was a decoder crash."""
        slot.process.join()
        code = slot.process.exitcode or 0
        task = slot.task
        current = slot.current_file.value.decode("utf-8", "surrogateescape")
        if task is None:
            if code == 0:
                return None
            raise ConversionError(f"A conversion worker exited with code {code} between tasks.")
        shard = task.shard
        where = f"{shard.name} (file {current!r})" if current else shard.name
        if code == -signal.SIGKILL:
            raise ConversionError(
                f"A conversion worker was killed (SIGKILL, most likely the out-of-memory killer) "
                f"while packing {where} into {shard.dst!r}. Use fewer --workers or free memory, "
                "then run the same command with --resume.")
        if code >= 0 or not current:
            raise ConversionError(f"A conversion worker exited unexpectedly (code {code}) while "
                                  f"packing {where}; run the same command with --resume.")
        detail = f"the decoder crashed the worker process ({_signal_name(code)})"
        if shard.strict:
            raise BadImageError(f"{os.path.join(shard.src, current)!r} cannot be packed: "
                                f"decode_error ({detail}). Fix or remove the file, or convert "
                                "without --strict to skip and list it.",
                                path=current, reason="decode_error")
        self._on_event("retry", f"{slot.packed} {slot.skipped}")
        return task.with_crash(current, detail)

    def close(self, *, force: bool) -> None:
        """Stop every worker: politely when done, at once after an error or Ctrl-C."""
        for slot in self._slots:
            if force:
                slot.process.kill()
            else:
                try:
                    slot.conn.send(None)
                except OSError:
                    slot.process.kill()
        for slot in self._slots:
            slot.process.join(timeout=10)
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join()
            slot.conn.close()


def run_shard_tasks(tasks: list[Task], *, workers: int, on_event: Callable[[str, str], None],
                    on_result: OnResult) -> None:
    """Run ``tasks`` on up to ``workers`` processes; see the module docstring.

    ``on_event(kind, detail)`` sees ``progress`` (detail ``"<packed> <skipped>"`` since the
    last report, a few times a second per worker) and ``retry`` (the same counts, already
    reported for a task that is being redone after a decoder crash);
    ``on_result`` gets each finished task's result, in completion order, and may return more
    tasks to run.

    Raises:
        ConversionInterrupted: Ctrl-C; workers are stopped at once.
        ConversionError, OutputError, SourceError, BadImageError: see the module docstring.
    """
    if not tasks:
        return
    pool = _Pool(max(1, min(workers, len(tasks))), on_event)
    try:
        pool.run(tasks, on_result)
    except KeyboardInterrupt:
        pool.close(force=True)
        raise ConversionInterrupted("Interrupted: the shards finished so far are kept. Run the same "
                                    "command with --resume to finish.") from None
    except BaseException:
        pool.close(force=True)
        raise
    pool.close(force=False)
