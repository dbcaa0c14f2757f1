"""Where conversion tasks run: the built-in process pool, or any ``concurrent.futures`` executor.

A conversion is a list of independent tasks (:class:`~packer.conversion.tasks.ShardTask`, or segments
of one). Each is idempotent: it writes under a name no other attempt uses and renames into
place, so running a task twice (a retry after a lost worker) gives the same bytes. An
:class:`Engine` runs such a list and reports back:

* :class:`LocalEngine` (the default, no extra dependency): long-lived worker processes on this
  machine, with the crash handling described in :mod:`packer.conversion.engines.local` (a decoder that kills
  its process gets its file skipped and listed);
* :class:`ExecutorEngine`: any executor with ``submit(fn, *args)`` returning a
  ``concurrent.futures.Future`` (a ``ProcessPoolExecutor``, or Dask's
  ``Client.get_executor()``; see :mod:`packer.conversion.engines.dask_cluster`). A lost worker is the executor's
  to retry; progress comes back through an optional :class:`ProgressChannel`, and otherwise
  as each task finishes.

Engines do not change the output: the tasks and their bytes are the same on all of them.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Final, Protocol, runtime_checkable

from packer.cpus import available_cpus
from packer.errors import ConversionError, ConversionInterrupted
from packer.conversion.tasks import SegmentResult, SegmentTask, ShardResult, ShardTask
from packer.conversion.engines.local import OnResult, describe_error, run_shard_tasks, task_error

__all__ = ["ENGINES", "Engine", "ExecutorEngine", "LocalEngine", "ProgressChannel",
           "execute_task", "open_engine", "task_key"]

#: Engine names for :func:`open_engine` (and ``packer convert --engine``).
ENGINES: Final = ("local", "dask", "slurm", "pbs")

Task = ShardTask | SegmentTask
OnEvent = Callable[[str, str], None]
#: How often a remote task sends its counts (each message costs the scheduler a little).
REPORT_EVERY = 0.25


@runtime_checkable
class Engine(Protocol):
    """Runs conversion tasks; ``parallelism`` is how many run at once (for splitting work)."""

    name: str

    @property
    def parallelism(self) -> int:
        """Tasks that run at the same time."""

    def run(self, tasks: list[Task], *, on_event: OnEvent, on_result: OnResult) -> None:
        """Run ``tasks``; see :func:`packer.conversion.engines.local.run_shard_tasks` for the callbacks."""


class LocalEngine:
    """The built-in pool of worker processes on this machine (see :mod:`packer.conversion.engines.local`)."""

    name = "local"

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.workers = workers

    @property
    def parallelism(self) -> int:
        """Worker processes."""
        return self.workers

    def run(self, tasks: list[Task], *, on_event: OnEvent, on_result: OnResult) -> None:
        """Run ``tasks`` on the worker processes."""
        run_shard_tasks(tasks, workers=self.workers, on_event=on_event, on_result=on_result)


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


class _Counter:
    """The ``notify`` a task gets remotely: counts files and reports them now and then."""

    def __init__(self, report: Callable[[int, int], None] | None) -> None:
        self._report = report
        self._packed = self._skipped = 0
        self._sent = time.monotonic()

    def __call__(self, event: str, relpath: str) -> None:
        if event == "packed":
            self._packed += 1
        elif event == "skipped":
            self._skipped += 1
        else:
            return
        if time.monotonic() - self._sent >= REPORT_EVERY:
            self.flush()

    def flush(self) -> None:
        if self._report is not None and (self._packed or self._skipped):
            self._report(self._packed, self._skipped)
        self._packed = self._skipped = 0
        self._sent = time.monotonic()


def execute_task(task: Task, channel: ProgressChannel | None = None) -> tuple[Any, ...]:
    """Run one task where the executor puts it: ``("result", result)`` or ``("error", ...)``.

    Errors come back as plain tuples (see :func:`packer.conversion.engines.local.describe_error`), not as
    exceptions, so that they unpickle anywhere and the coordinator can name the shard.
    """
    counter = _Counter(channel.reporter(task_key(task)) if channel is not None else None)
    try:
        result = task.run(counter)
    except Exception as err:  # every failure goes back as data; see describe_error
        return ("error", *describe_error(err))
    counter.flush()
    return ("result", result)


def _counts(result: ShardResult | SegmentResult) -> tuple[int, int]:
    packed = result.packed if isinstance(result, SegmentResult) else result
    return len(packed.relpaths), len(packed.skipped)


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

    def run(self, tasks: list[Task], *, on_event: OnEvent, on_result: OnResult) -> None:
        """Submit every task, then handle results as they complete."""
        running: dict[cf.Future[Any], Task] = {}
        reported: dict[str, tuple[int, int]] = {}
        finished: set[str] = set()

        def submit(batch: Iterable[Task]) -> None:
            for task in batch:
                running[self.executor.submit(execute_task, task, self.channel)] = task

        try:
            submit(tasks)
            while running:
                done, _ = cf.wait(running, timeout=REPORT_EVERY, return_when=cf.FIRST_COMPLETED)
                self._progress(on_event, reported, finished)
                for future in done:
                    task = running.pop(future)
                    submit(self._finish(task, future, on_event, on_result, reported, finished))
        except KeyboardInterrupt:
            self._cancel(running)
            raise ConversionInterrupted("Interrupted: the shards finished so far are kept. Run the "
                                        "same command with --resume to finish.") from None
        except BaseException:
            self._cancel(running)
            raise

    def _progress(self, on_event: OnEvent, reported: dict[str, tuple[int, int]],
                  finished: set[str]) -> None:
        if self.channel is None:
            return
        for key, packed, skipped in self.channel.drain():
            if key in finished:  # a late report: the final counts were already taken
                continue
            before = reported.get(key, (0, 0))
            reported[key] = (before[0] + packed, before[1] + skipped)
            on_event("progress", f"{packed} {skipped}")

    def _finish(self, task: Task, future: cf.Future[Any], on_event: OnEvent, on_result: OnResult,
                reported: dict[str, tuple[int, int]], finished: set[str]) -> Iterable[Task]:
        try:
            outcome = future.result()
        except Exception as err:  # the executor's own failure: a worker lost too often, ...
            raise ConversionError(f"The {self.name} engine could not run {task_key(task)} for "
                                  f"{task.shard.dst!r}: {type(err).__name__}: {err}. Finished shards "
                                  "are kept: run the same command with --resume.") from err
        if outcome[0] == "error":
            raise task_error(task, *outcome[1:])
        result = outcome[1]
        key = task_key(task)
        finished.add(key)
        # What was reported may be off (a retried attempt's counts, a lost last report):
        # take it back and count the result's own numbers.
        packed, skipped = reported.pop(key, (0, 0))
        if packed or skipped:
            on_event("retry", f"{packed} {skipped}")
        on_event("progress", "{} {}".format(*_counts(result)))
        return on_result(result)

    @staticmethod
    def _cancel(running: dict[cf.Future[Any], Task]) -> None:
        for future in running:
            future.cancel()


@contextmanager
def open_engine(name: str = "local", *, workers: int | None = None, scheduler: str | None = None,
                jobs: int | None = None, queue: str | None = None, walltime: str | None = None,
                account: str | None = None, cores: int = 4, memory: str = "16GB") -> Iterator[Engine]:
    """The engine ``packer convert --engine NAME`` uses, open for the block.

    ``local``: ``workers`` processes here. ``dask``: the cluster at ``scheduler``, or a
    ``LocalCluster`` of ``workers`` processes. ``slurm``/``pbs``: ``jobs`` batch jobs of
    ``cores`` single-threaded workers and ``memory`` each, in partition/queue ``queue``, for
    ``walltime``, charged to ``account``. The last three need ``pip install 'packer[dask]'``.

    Raises:
        ValueError: unknown name, or options that do not fit the engine (the message says which).
        MissingExtraError: the engine's extra is not installed.
    """
    if name not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {name!r}")
    batch = {"--jobs": jobs, "--partition/--queue": queue, "--walltime": walltime, "--account": account}
    if name in ("local", "dask"):
        wrong = [flag for flag, value in batch.items() if value is not None]
        if scheduler is not None and name == "local":
            wrong.append("--scheduler")
        if wrong:
            raise ValueError(f"{', '.join(wrong)} only apply to "
                             f"{'--engine dask' if wrong == ['--scheduler'] else '--engine slurm or pbs'}")
    if name == "local":
        yield LocalEngine(workers or available_cpus())
        return
    from packer.conversion.engines import dask_cluster as dask_engine  # the optional extra, only when asked for

    if name == "dask":
        if scheduler is not None and workers is not None:
            raise ValueError("--workers sizes a local Dask cluster; with --scheduler the cluster "
                             "has its own workers")
        with dask_engine.dask_engine(scheduler, workers=workers) as engine:
            yield engine
        return
    if scheduler is not None or workers is not None:
        raise ValueError(f"--engine {name} starts its own workers: use --jobs and --job-cores, "
                         "not --scheduler or --workers")
    if jobs is None or walltime is None:
        raise ValueError(f"--engine {name} needs --jobs and --walltime")
    with dask_engine.jobqueue_engine(name, jobs=jobs, queue=queue, walltime=walltime, cores=cores,
                                     memory=memory, account=account) as engine:
        yield engine
