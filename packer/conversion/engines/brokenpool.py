"""Go on after a ``ProcessPoolExecutor`` breaks: which task's worker died, and a fresh pool.

A worker of a ``concurrent.futures.ProcessPoolExecutor`` that dies (a decoder's segfault, the
out-of-memory killer) breaks the whole pool: every pending future fails with
``BrokenProcessPool``, the other workers are terminated (SIGTERM) and the pool takes no more
work. :class:`~packer.conversion.engines.executor.ExecutorEngine` then asks this module:

* :func:`blame`: the exit code of each worker (read from the broken pool before it is shut
  down) against the breadcrumb each interrupted task left
  (:mod:`~packer.conversion.engines.crashes`): the task whose worker died by a crash signal
  keeps its breadcrumb, so that the file is skipped once :data:`CRASHES_TO_PIN` attempts died
  on it; the breadcrumbs of workers the pool terminated are dropped (their files did nothing
  wrong); a worker killed by SIGKILL or that exited ends the run, as on the local engine.
* :func:`fresh_pool`: a new pool with the broken one's ``max_workers``, ``mp_context``,
  ``initializer``/``initargs`` and ``max_tasks_per_child``, which the engine owns and shuts
  down at the end of the run. The pool it was given stays broken (and is the caller's to shut
  down, as before).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import signal
from collections.abc import Iterable
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from packer.conversion.engines.base import task_key
from packer.conversion.engines.crashes import CRASHES_TO_PIN, Breadcrumb
from packer.conversion.tasks import Task, shard_of
from packer.errors import ConversionError

__all__ = ["blame", "exit_codes", "fresh_pool", "is_broken", "stop_pool"]

log = logging.getLogger(__name__)


def is_broken(future: cf.Future[Any]) -> bool:
    """Whether ``future`` failed because its process pool broke."""
    return not future.cancelled() and isinstance(future.exception(), BrokenProcessPool)


def exit_codes(pool: cf.ProcessPoolExecutor) -> dict[int, int | None] | None:
    """Shut the broken ``pool`` down and return its workers' exit codes by pid (None when this
    Python's pool does not tell)."""
    processes = getattr(pool, "_processes", None)
    workers = dict(processes) if isinstance(processes, dict) else None
    pool.shutdown(wait=True)  # joins the pool's manager thread, which joined every worker
    if workers is None:
        return None
    return {pid: process.exitcode for pid, process in workers.items()}


def fresh_pool(broken: cf.ProcessPoolExecutor) -> cf.ProcessPoolExecutor:
    """A new process pool set up as ``broken`` was."""
    options: dict[str, Any] = {
        "max_workers": getattr(broken, "_max_workers", None),
        "mp_context": getattr(broken, "_mp_context", None),
        "initializer": getattr(broken, "_initializer", None),
        "initargs": getattr(broken, "_initargs", ()),
    }
    per_child = getattr(broken, "_max_tasks_per_child", None)
    if per_child is not None:
        options["max_tasks_per_child"] = per_child
    return cf.ProcessPoolExecutor(**options)


def stop_pool(pool: cf.ProcessPoolExecutor) -> None:
    """Stop a pool the engine made, now: its workers are terminated, pending tasks dropped."""
    processes = getattr(pool, "_processes", None)
    for process in list(processes.values()) if isinstance(processes, dict) else []:
        process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def blame(tasks: Iterable[Task], codes: dict[int, int | None] | None) -> None:
    """Keep the breadcrumbs of the tasks whose worker crashed; drop the others'.

    ``tasks`` were running or queued when the pool broke; ``codes`` are its workers' exit
    codes (:func:`exit_codes`); None keeps every breadcrumb (each then counts as a crash).

    Raises:
        ConversionError: a worker was killed by SIGKILL (most likely the out-of-memory killer)
            or exited, or died where no task was on a file (nothing to pin; the same death
            would come again).
    """
    crashed = 0
    for task in tasks:
        shard = shard_of(task)
        if not shard.staging:
            continue
        crumb = Breadcrumb(shard.staging, task_key(task))
        trail = crumb.previous()
        if trail is None:  # queued, or between files: nothing to blame
            continue
        code = None if codes is None else codes.get(trail.pid)
        where = f"{shard.name} (file {trail.file!r}) into {shard.dst!r}"
        if codes is not None and (code is None or code == -signal.SIGTERM):
            crumb.clear()  # stopped by the pool as it broke, or still alive: not its file's fault
            continue
        if code == -signal.SIGKILL:
            raise ConversionError(
                f"A conversion worker was killed (SIGKILL, most likely the out-of-memory killer) "
                f"while packing {where}. Use fewer workers or free memory, then run the same "
                "conversion again with resume=True.")
        if code is not None and code >= 0:
            raise ConversionError(f"A conversion worker exited unexpectedly (code {code}) while "
                                  f"packing {where}; run the same conversion again with resume=True.")
        crashed += 1
        how = "it died" if code is None else f"{_signal_name(code)}"
        log.warning("a worker of the process pool crashed (%s) on %s, attempt %d; the file is "
                    "skipped once %d attempts died on it", how, where, trail.attempts, CRASHES_TO_PIN)
    if not crashed:
        died = sorted({_signal_name(c) if c < 0 else f"exit code {c}"
                       for c in (codes or {}).values() if c is not None})
        raise ConversionError(f"A worker of the process pool died ({', '.join(died) or 'no exit code'}) "
                              "while no task was on a file, so the death cannot be pinned on one. "
                              "Run the same conversion again with resume=True.")
