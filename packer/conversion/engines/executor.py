"""Run conversion tasks on any ``concurrent.futures``-style executor (a process pool, Dask).

A lost worker is the executor's to retry (each task is idempotent: it writes under a name no
other attempt uses and renames into place). Dask retries on its own; a ``ProcessPoolExecutor``
breaks instead when a worker dies, and the engine goes on with a fresh pool
(:mod:`~packer.conversion.engines.brokenpool`), resubmitting every task that had not finished.
A decoder that crashes its worker is pinned on its file either way
(:mod:`~packer.conversion.engines.crashes`). Per-file progress comes back through an optional
:class:`~packer.conversion.engines.base.ProgressChannel`, otherwise as each task finishes; the
counts of a finished task always replace what it reported, so a retried task is not counted twice.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Iterable
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Final

from packer.conversion.engines import brokenpool
from packer.conversion.engines.base import (
    INTERRUPTED,
    OnProgress,
    OnResult,
    Progress,
    ProgressChannel,
    ProgressCounter,
    TaskFailure,
    task_error,
    task_key,
)
from packer.conversion.engines.crashes import Breadcrumb, pin_crashes
from packer.conversion.receipts import ShardResult
from packer.conversion.tasks import SegmentResult, Task, shard_of
from packer.errors import ConversionError, ConversionInterrupted

__all__ = ["REPORT_EVERY", "ExecutorEngine", "execute_task"]

#: How often a remote task sends its counts (each message costs the scheduler a little).
REPORT_EVERY: Final = 0.25


def execute_task(task: Task, channel: ProgressChannel | None = None) -> tuple[str, Any]:
    """Run one task where the executor puts it: ``("result", result)`` or ``("error", failure)``.

    A file that crashed the decoder in earlier attempts is skipped (see
    :mod:`~packer.conversion.engines.crashes`). A failure comes back as a
    :class:`~packer.conversion.engines.base.TaskFailure` holding the exception itself, not
    raised, so that the executor does not count it as a lost worker and the coordinator can
    name the shard.
    """
    key = task_key(task)
    report = channel.reporter(key) if channel is not None else None
    crumb = Breadcrumb(shard_of(task).staging, key) if shard_of(task).staging else None
    before = crumb.previous() if crumb is not None else None
    counter = ProgressCounter(None if report is None else lambda p: report(p.packed, p.skipped),
                              every=REPORT_EVERY,
                              on_file=None if crumb is None else lambda rel: crumb.reached(rel, before))
    try:
        result = pin_crashes(task, before).run(counter)
    except Exception as err:  # every failure goes back, as itself; see TaskFailure
        return ("error", TaskFailure.of(err))
    finally:
        if crumb is not None:
            crumb.clear()
    counter.flush()
    return ("result", result)


def _counts(result: ShardResult | SegmentResult) -> Progress:
    packed = result.packed if isinstance(result, SegmentResult) else result
    return Progress(len(packed.relpaths), len(packed.skipped))


class _Submitter:
    """The executor tasks go to: the one given, or the fresh pool that replaced it when it broke."""

    def __init__(self, given: Any) -> None:
        self.current: Any = given
        self.owned: cf.ProcessPoolExecutor | None = None
        self.stranded: list[Task] = []  # refused by a pool that broke as they were submitted

    def submit(self, task: Task, channel: ProgressChannel | None) -> cf.Future[Any] | None:
        try:
            future: cf.Future[Any] = self.current.submit(execute_task, task, channel)
        except BrokenProcessPool:
            if not isinstance(self.current, cf.ProcessPoolExecutor):
                raise
            self.stranded.append(task)
            return None
        return future

    def renew(self) -> None:
        """Replace the broken process pool with a fresh one set up alike."""
        fresh = brokenpool.fresh_pool(self.current)
        if self.owned is not None:
            self.owned.shutdown(wait=True)
        self.current = self.owned = fresh

    def close(self, *, failed: bool) -> None:
        """Shut down the pool this run made, if it made one (the given executor is the caller's)."""
        if self.owned is None:
            return
        if failed:
            brokenpool.stop_pool(self.owned)
        else:
            self.owned.shutdown(wait=True)
        self.current, self.owned = None, None


class ExecutorEngine:
    """Runs tasks on an executor with ``concurrent.futures``' ``submit``.

    Args:
        executor: ``submit(fn, *args)`` must return a ``concurrent.futures.Future``. The
            engine does not shut it down.
        parallelism: How many tasks the executor runs at once (used to split small jobs).
        channel: Per-file progress from the tasks; without one, progress moves as tasks finish.
        name: For messages.

    A task whose worker was lost is the executor's to retry (Dask does). A
    ``ProcessPoolExecutor`` whose worker dies breaks: the engine then runs the rest of the job
    on a fresh pool set up as the given one was (same ``max_workers``, ``mp_context``,
    ``initializer``, ``initargs`` and ``max_tasks_per_child``), which it shuts down at the end
    of :meth:`run`; the given pool stays broken. Every task that had not finished is
    resubmitted; a decoder that crashed its worker is pinned on its file
    (:mod:`~packer.conversion.engines.brokenpool`). A task that fails ends the run with the
    same error the local engine gives.
    """

    def __init__(self, executor: Any, parallelism: int, *, channel: ProgressChannel | None = None,
                 name: str = "executor") -> None:
        if parallelism < 1:
            raise ValueError(f"parallelism must be at least 1, not {parallelism}")
        self.executor, self.channel, self.name = executor, channel, name
        self._parallelism = parallelism

    @property
    def parallelism(self) -> int:
        """Tasks the executor runs at once."""
        return self._parallelism

    def run(self, tasks: list[Task], *, on_progress: OnProgress, on_result: OnResult) -> None:
        """Submit every task, then handle results as they complete."""
        running: dict[cf.Future[Any], Task] = {}
        reported: dict[str, Progress] = {}
        finished: set[str] = set()
        pool = _Submitter(self.executor)

        def submit(batch: Iterable[Task]) -> None:
            for task in batch:
                future = pool.submit(task, self.channel)
                if future is not None:
                    running[future] = task

        failed = True
        try:
            submit(tasks)
            while running or pool.stranded:
                done, _ = cf.wait(running, timeout=REPORT_EVERY, return_when=cf.FIRST_COMPLETED)
                self._progress(on_progress, reported, finished)
                if pool.stranded or (isinstance(pool.current, cf.ProcessPoolExecutor)
                                     and any(brokenpool.is_broken(future) for future in done)):
                    submit(self._recover(pool, running, on_progress, on_result, reported, finished))
                    continue
                for future in done:
                    task = running.pop(future)
                    submit(self._finish(task, future, on_progress, on_result, reported, finished))
            failed = False
        except KeyboardInterrupt:
            self._cancel(running)
            raise ConversionInterrupted(INTERRUPTED) from None
        except BaseException:
            self._cancel(running)
            raise
        finally:
            pool.close(failed=failed)

    def _recover(self, pool: _Submitter, running: dict[cf.Future[Any], Task], on_progress: OnProgress,
                 on_result: OnResult, reported: dict[str, Progress], finished: set[str]) -> list[Task]:
        """The pool broke: finish what finished, blame the crash, and return what to run again
        on a fresh pool."""
        cf.wait(running)  # a broken pool fails every pending future at once
        codes = brokenpool.exit_codes(pool.current)
        broken: list[Task] = []
        more: list[Task] = []
        for future, task in list(running.items()):
            del running[future]
            if brokenpool.is_broken(future):
                broken.append(task)
            else:
                more.extend(self._finish(task, future, on_progress, on_result, reported, finished))
        if broken:  # else the pool was broken before this run used it: nothing of ours died
            brokenpool.blame(broken, codes)
        again = broken + pool.stranded
        pool.stranded = []
        for task in again:  # its counts come again from the new attempt
            taken = reported.pop(task_key(task), None)
            if taken is not None and (taken.packed or taken.skipped):
                on_progress(Progress(taken.packed, taken.skipped, retracted=True))
        pool.renew()
        return again + more

    def _progress(self, on_progress: OnProgress, reported: dict[str, Progress],
                  finished: set[str]) -> None:
        if self.channel is None:
            return
        for key, packed, skipped in self.channel.drain():
            if key in finished:  # a late report: the final counts were already taken
                continue
            before = reported.get(key, Progress(0, 0))
            reported[key] = Progress(before.packed + packed, before.skipped + skipped)
            on_progress(Progress(packed, skipped))

    def _finish(self, task: Task, future: cf.Future[Any], on_progress: OnProgress,
                on_result: OnResult, reported: dict[str, Progress], finished: set[str]) -> Iterable[Task]:
        try:
            outcome = future.result()
        except Exception as err:  # the executor's own failure: a worker lost too often, ...
            raise ConversionError(f"The {self.name} engine could not run {task_key(task)} for "
                                  f"{shard_of(task).dst!r}: {type(err).__name__}: {err}. Finished "
                                  "shards are kept: run the same conversion again with "
                                  "resume=True.") from err
        if outcome[0] == "error":
            raise task_error(task, outcome[1])
        result = outcome[1]
        key = task_key(task)
        finished.add(key)
        # What was reported may be off (a retried attempt's counts, a lost last report):
        # take it back and count the result's own numbers.
        taken = reported.pop(key, None)
        if taken is not None and (taken.packed or taken.skipped):
            on_progress(Progress(taken.packed, taken.skipped, retracted=True))
        on_progress(_counts(result))
        return on_result(result)

    @staticmethod
    def _cancel(running: dict[cf.Future[Any], Task]) -> None:
        for future in running:
            future.cancel()
