"""Run conversion tasks on any ``concurrent.futures``-style executor (a process pool, Dask).

A lost worker is the executor's to retry (each task is idempotent: it writes under a name no
other attempt uses and renames into place). Per-file progress comes back through an optional
:class:`~packer.conversion.engines.base.ProgressChannel`, otherwise as each task finishes; the
counts of a finished task always replace what it reported, so a retried task is not counted twice.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Iterable
from typing import Any, Final

from packer.conversion.engines.base import (
    OnProgress,
    OnResult,
    Progress,
    ProgressChannel,
    ProgressCounter,
    describe_error,
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


def execute_task(task: Task, channel: ProgressChannel | None = None) -> tuple[Any, ...]:
    """Run one task where the executor puts it: ``("result", result)`` or ``("error", ...)``.

    A file that crashed the decoder in earlier attempts is skipped (see
    :mod:`~packer.conversion.engines.crashes`). Errors come back as plain tuples (see
    :func:`~packer.conversion.engines.base.describe_error`), not as exceptions, so that they
    unpickle anywhere and the coordinator can name the shard.
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
    except Exception as err:  # every failure goes back as data; see describe_error
        return ("error", *describe_error(err))
    finally:
        if crumb is not None:
            crumb.clear()
    counter.flush()
    return ("result", result)


def _counts(result: ShardResult | SegmentResult) -> Progress:
    packed = result.packed if isinstance(result, SegmentResult) else result
    return Progress(len(packed.relpaths), len(packed.skipped))


class ExecutorEngine:
    """Runs tasks on an executor with ``concurrent.futures``' ``submit``.

    Args:
        executor: ``submit(fn, *args)`` must return a ``concurrent.futures.Future``. The
            engine does not shut it down.
        parallelism: How many tasks the executor runs at once (used to split small jobs).
        channel: Per-file progress from the tasks; without one, progress moves as tasks finish.
        name: For messages.

    A task whose worker was lost is the executor's to retry (Dask does); a task that fails
    ends the run with the same error the local engine gives.
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

        def submit(batch: Iterable[Task]) -> None:
            for task in batch:
                running[self.executor.submit(execute_task, task, self.channel)] = task

        try:
            submit(tasks)
            while running:
                done, _ = cf.wait(running, timeout=REPORT_EVERY, return_when=cf.FIRST_COMPLETED)
                self._progress(on_progress, reported, finished)
                for future in done:
                    task = running.pop(future)
                    submit(self._finish(task, future, on_progress, on_result, reported, finished))
        except KeyboardInterrupt:
            self._cancel(running)
            raise ConversionInterrupted("Interrupted: the shards finished so far are kept. Run the "
                                        "same command with --resume to finish.") from None
        except BaseException:
            self._cancel(running)
            raise

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
                                  "shards are kept: run the same command with --resume.") from err
        if outcome[0] == "error":
            raise task_error(task, *outcome[1:])
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
