"""Run a conversion's shard tasks on Dask: an existing cluster, a local one, or Slurm/PBS jobs.

Needs the ``dask`` extra (``pip install 'packer-shards[dask]'``: ``distributed`` and ``dask-jobqueue``
only); nothing here is imported by ``import packer``. Every Dask worker must see SRC and DST at
the same paths (shared storage) and run the same packer.

* :func:`dask_engine` with a scheduler address uses a running cluster; without one it starts a
  ``LocalCluster`` of single-threaded worker processes (decoding holds the GIL).
* :func:`jobqueue_engine` submits ``jobs`` batch jobs through dask-jobqueue (``slurm`` or
  ``pbs``), each running one single-threaded worker per core, and closes them at the end.

Tasks go through ``Client.get_executor()`` (a ``concurrent.futures`` executor) into
:class:`packer.conversion.engines.ExecutorEngine`. Per-file progress comes back as worker events on a
topic of this run (``Worker.log_event`` / ``Client.subscribe_topic``). A task whose worker
dies (killed, pre-empted, out of memory) is rescheduled by Dask on another worker; shard tasks
are idempotent, so the retry writes the same bytes. A task that kills workers repeatedly
(``distributed.scheduler.allowed-failures``, 3 by default) ends the run with an error naming
its shard; a decoder that crashes its worker is pinned on its file first, as on the local engine
(:mod:`~packer.conversion.engines.crashes`).
"""

from __future__ import annotations

import logging
import queue
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

from packer.conversion.engines.executor import ExecutorEngine
from packer.cpus import available_cpus
from packer.errors import ConversionError, MissingExtraError, UnknownNameError

__all__ = ["JOBQUEUE_KINDS", "DaskProgress", "dask_engine", "job_script", "jobqueue_cluster",
           "jobqueue_engine"]

#: Batch systems :func:`jobqueue_engine` can start workers on, and the command each submits with.
JOBQUEUE_KINDS: Final = ("slurm", "pbs")
_SUBMIT: Final = {"slurm": "sbatch", "pbs": "qsub"}

_INSTALL = "pip install 'packer-shards[dask]'"


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as err:
        raise MissingExtraError(f"The Dask engine needs the 'dask' extra ({err}): {_INSTALL}") from None
    return distributed


def _jobqueue() -> Any:
    try:
        import dask_jobqueue
    except ImportError as err:
        raise MissingExtraError(f"Slurm and PBS workers need the 'dask' extra ({err}): {_INSTALL}") from None
    return dask_jobqueue


class DaskProgress:
    """Per-file counts from Dask workers, as events on a topic only this run uses.

    Pickled to the workers with each task: only the topic travels; the client side keeps a
    queue that the subscription fills from the client's event loop thread.
    """

    def __init__(self, topic: str | None = None) -> None:
        self.topic = topic or f"packer-progress-{uuid.uuid4().hex}"
        self._received: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def __getstate__(self) -> dict[str, Any]:
        return {"topic": self.topic}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["topic"])  # type: ignore[misc]

    def attach(self, client: Any) -> None:
        """Start receiving this run's events on ``client``."""
        client.subscribe_topic(self.topic, self._received.put)

    def detach(self, client: Any) -> None:
        """Stop receiving them."""
        client.unsubscribe_topic(self.topic)

    def reporter(self, key: str) -> Callable[[int, int], None]:
        """In a worker: sends ``(key, packed, skipped)`` as an event of the current worker."""
        topic = self.topic

        def report(packed: int, skipped: int) -> None:
            _distributed().get_worker().log_event(topic, [key, packed, skipped])

        return report

    def drain(self) -> list[tuple[str, int, int]]:
        """The reports received so far."""
        reports: list[tuple[str, int, int]] = []
        while True:
            try:
                event = self._received.get_nowait()
            except queue.Empty:
                return reports
            message = event[1] if isinstance(event, tuple) and len(event) == 2 else event
            key, packed, skipped = message
            reports.append((str(key), int(packed), int(skipped)))


@contextmanager
def dask_engine(scheduler: str | None = None, *, workers: int | None = None, cluster: Any = None,
                parallelism: int | None = None) -> Iterator[ExecutorEngine]:
    """An engine on Dask, closed (with the cluster it started) on leaving the block.

    Args:
        scheduler: Address of a running scheduler (``tcp://host:8786``); its workers must see
            SRC and DST at the same paths.
        workers: Without ``scheduler`` or ``cluster``: the ``LocalCluster``'s worker processes
            (default: the usable CPUs).
        cluster: A Dask cluster object to use (one from :func:`jobqueue_cluster`, for example).
        parallelism: Tasks running at once, when the cluster's workers are still starting
            (batch jobs); default: the threads of the workers connected now.

    Raises:
        MissingExtraError: ``distributed`` is not installed.
    """
    distributed = _distributed()
    owned = None
    if scheduler is not None and cluster is not None:
        raise ValueError("give a scheduler address or a cluster, not both")
    if scheduler is None and cluster is None:
        owned = cluster = distributed.LocalCluster(n_workers=workers or available_cpus(),
                                                   threads_per_worker=1, processes=True,
                                                   dashboard_address=None,
                                                   silence_logs=logging.WARNING)
    try:
        client = distributed.Client(scheduler if scheduler is not None else cluster)
    except (OSError, TimeoutError) as err:
        if owned is not None:
            owned.close()
        raise ConversionError(f"Cannot reach the Dask scheduler at {scheduler or cluster!r}: {err}. Check "
                              "the address (tcp://HOST:8786) and that the scheduler is running; "
                              "nothing was written.") from err
    channel = DaskProgress()
    try:
        channel.attach(client)
        connected = sum(client.nthreads().values())
        engine = ExecutorEngine(client.get_executor(pure=False), parallelism or max(1, connected),
                                channel=channel, name="dask")
        yield engine
    finally:
        try:
            channel.detach(client)
        finally:
            client.close()
            if owned is not None:
                owned.close()


def jobqueue_cluster(kind: str, *, queue: str | None, walltime: str, cores: int = 4,
                     memory: str = "16GB", account: str | None = None,
                     job_extra_directives: tuple[str, ...] = (), **options: Any) -> Any:
    """A dask-jobqueue cluster (no jobs submitted yet): one worker process per core.

    Args:
        kind: ``"slurm"`` or ``"pbs"``.
        queue: Slurm partition or PBS queue (None: the batch system's default).
        walltime: Job time limit, as the batch system writes it (``"01:00:00"``).
        cores: Cores per job, each running one single-threaded worker.
        memory: Memory per job (``"16GB"``).
        account: Account or project to charge.
        job_extra_directives: More ``#SBATCH`` / ``#PBS`` lines' arguments.
        options: Passed on to dask-jobqueue (``local_directory``, ``job_script_prologue``...).

    Raises:
        UnknownNameError: unknown ``kind`` (the message lists the choices).
        MissingExtraError: dask-jobqueue is not installed.
    """
    if kind not in JOBQUEUE_KINDS:
        raise UnknownNameError(f"Unknown batch system {kind!r}; available: "
                               f"{', '.join(sorted(JOBQUEUE_KINDS))}")
    jobqueue = _jobqueue()
    cls = jobqueue.SLURMCluster if kind == "slurm" else jobqueue.PBSCluster
    options.setdefault("job_name", "packer-convert")
    return cls(queue=queue, walltime=walltime, cores=cores, processes=cores, memory=memory,
               account=account, job_extra_directives=list(job_extra_directives),
               dashboard_address=None, **options)


def job_script(kind: str, **options: Any) -> str:
    """The batch script :func:`jobqueue_engine` would submit for each job (nothing submitted)."""
    options.setdefault("scheduler_options", {"dashboard": False})  # nothing to watch
    cluster = jobqueue_cluster(kind, **options)
    try:
        return str(cluster.job_script())
    finally:
        cluster.close()


@contextmanager
def jobqueue_engine(kind: str, *, jobs: int, **options: Any) -> Iterator[ExecutorEngine]:
    """An engine on ``jobs`` Slurm or PBS jobs (see :func:`jobqueue_cluster` for ``options``);
    the jobs end with the block."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs}")
    submit = _SUBMIT[kind]
    if shutil.which(submit) is None:  # else the jobs never start and the run waits for ever
        raise ConversionError(f'open_engine("{kind}") submits jobs with `{submit}`, which is not on '
                              f"PATH here: run packer on a {kind.upper()} login node, or use array "
                              'tasks (num_tasks=, task_id=) or open_engine("dask") instead; nothing '
                              "was written.")
    cluster = jobqueue_cluster(kind, **options)
    try:
        cluster.scale(jobs=jobs)
        with dask_engine(cluster=cluster, parallelism=jobs * options.get("cores", 4)) as engine:
            yield engine
    finally:
        cluster.close()
