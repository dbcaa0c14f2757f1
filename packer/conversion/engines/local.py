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
  run with that error, of its own type (see :func:`~packer.conversion.engines.base.task_error`);
  shards already renamed into DST stay for ``resume=True``.

Workers start with ``fork`` when the coordinator runs a single thread (the command line; the
fork handler closes any open shard readers first) and with ``spawn`` otherwise, so no lock held
by another thread is ever inherited. They die with the coordinator (``PR_SET_PDEATHSIG`` on
Linux) and ignore SIGINT, which only the coordinator handles.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import signal
import sys
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from packer.conversion.engines.base import (
    INTERRUPTED,
    OnProgress,
    OnResult,
    Progress,
    ProgressCounter,
    TaskFailure,
    task_error,
)
from packer.conversion.tasks import Task, shard_of
from packer.errors import BadImageError, ConversionError, ConversionInterrupted

__all__ = ["START_METHOD", "LocalEngine", "run_shard_tasks"]

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


def _reporter(conn: Connection, current: Any) -> ProgressCounter:
    """The worker's side of progress: counts sent in batches, and the file it is on.

    The current file lives in shared memory, not in messages, so the coordinator can name
    the file a crashed worker was decoding at no cost per file.
    """

    def on_file(relpath: str) -> None:
        current.value = relpath.encode("utf-8", "surrogateescape")[:_CURRENT_BYTES - 1]

    return ProgressCounter(lambda progress: conn.send(("progress", progress)), every=_PROGRESS_EVERY,
                           on_file=on_file)


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
        report = _reporter(conn, current)
        try:
            result = task.run(report)
            report.flush()
        except Exception as err:  # every failure goes back, as itself; see TaskFailure
            conn.send(("error", TaskFailure.of(err)))
        else:
            conn.send(("result", result))


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


class _Pool:
    """The coordinator's view of the workers; see the module docstring."""

    def __init__(self, workers: int, on_progress: OnProgress) -> None:
        self._context: Any = multiprocessing.get_context(_start_method())
        self._slots: list[_Slot] = []
        self._on_progress = on_progress
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
                failure: TaskFailure = message[1]
                if slot.task is None:
                    raise ConversionError(f"A conversion worker failed outside a task: "
                                          f"{failure.error or failure.trace}")
                raise task_error(slot.task, failure)
            elif kind == "progress":
                progress: Progress = message[1]
                slot.packed += progress.packed
                slot.skipped += progress.skipped
                self._on_progress(progress)

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
        shard = shard_of(task)
        where = f"{shard.name} (file {current!r})" if current else shard.name
        if code == -signal.SIGKILL:
            raise ConversionError(
                f"A conversion worker was killed (SIGKILL, most likely the out-of-memory killer) "
                f"while packing {where} into {shard.dst!r}. Use fewer workers= or free memory, "
                "then run the same conversion again with resume=True.")
        if code >= 0 or not current:
            raise ConversionError(f"A conversion worker exited unexpectedly (code {code}) while "
                                  f"packing {where}; run the same conversion again with resume=True.")
        detail = f"the decoder crashed the worker process ({_signal_name(code)})"
        if shard.strict:
            raise BadImageError(f"{shard.reader.where(current)!r} cannot be packed: "
                                f"decode_error ({detail}). Fix or remove the file, or convert "
                                "without strict=True to skip and list it.",
                                path=current, reason="decode_error")
        self._on_progress(Progress(slot.packed, slot.skipped, retracted=True))
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


def run_shard_tasks(tasks: list[Task], *, workers: int, on_progress: OnProgress,
                    on_result: OnResult) -> None:
    """Run ``tasks`` on up to ``workers`` processes; see the module docstring.

    ``on_progress`` sees each worker's counts a few times a second, and counts taken back
    (``retracted``) for a task redone after a decoder crash; ``on_result`` gets each finished
    task's result, in completion order, and may return more tasks to run.

    Raises:
        ConversionInterrupted: Ctrl-C; workers are stopped at once.
        ConversionError, OutputError, SourceError, BadImageError: see the module docstring.
    """
    if not tasks:
        return
    pool = _Pool(max(1, min(workers, len(tasks))), on_progress)
    try:
        pool.run(tasks, on_result)
    except KeyboardInterrupt:
        pool.close(force=True)
        raise ConversionInterrupted(INTERRUPTED) from None
    except BaseException:
        pool.close(force=True)
        raise
    pool.close(force=False)


class LocalEngine:
    """The built-in pool of worker processes on this machine (the default engine)."""

    name = "local"

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.workers = workers

    @property
    def parallelism(self) -> int:
        """Worker processes."""
        return self.workers

    def run(self, tasks: list[Task], *, on_progress: OnProgress, on_result: OnResult) -> None:
        """Run ``tasks`` on the worker processes (see :func:`run_shard_tasks`)."""
        run_shard_tasks(tasks, workers=self.workers, on_progress=on_progress, on_result=on_result)
