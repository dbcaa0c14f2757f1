"""Choose and open an engine by name: what ``packer convert --engine NAME`` does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from packer.conversion.engines.base import Engine
from packer.conversion.engines.local import LocalEngine
from packer.cpus import available_cpus

__all__ = ["ENGINES", "open_engine"]

#: Engine names for :func:`open_engine` (and ``packer convert --engine``).
ENGINES: Final = ("local", "dask", "slurm", "pbs")


def _check_flags(name: str, scheduler: str | None, batch: dict[str, object]) -> None:
    if name not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {name!r}")
    if name in ("local", "dask"):
        wrong = [flag for flag, value in batch.items() if value is not None]
        if scheduler is not None and name == "local":
            wrong.append("--scheduler")
        if wrong:
            raise ValueError(f"{', '.join(wrong)} only apply to "
                             f"{'--engine dask' if wrong == ['--scheduler'] else '--engine slurm or pbs'}")


@contextmanager
def open_engine(name: str = "local", *, workers: int | None = None, scheduler: str | None = None,
                jobs: int | None = None, queue: str | None = None, walltime: str | None = None,
                account: str | None = None, cores: int = 4, memory: str = "16GB") -> Iterator[Engine]:
    """The engine ``packer convert --engine NAME`` uses, open for the block.

    ``local``: ``workers`` processes here. ``dask``: the cluster at ``scheduler``, or a
    ``LocalCluster`` of ``workers`` processes. ``slurm``/``pbs``: ``jobs`` batch jobs of
    ``cores`` single-threaded workers and ``memory`` each, in partition/queue ``queue``, for
    ``walltime``, charged to ``account``. The last three need the ``dask`` extra.

    Raises:
        ValueError: unknown name, or options that do not fit the engine (the message says which).
        MissingExtraError: the engine's extra is not installed.
    """
    _check_flags(name, scheduler, {"--jobs": jobs, "--partition/--queue": queue,
                                   "--walltime": walltime, "--account": account})
    if name == "local":
        yield LocalEngine(workers or available_cpus())
        return
    from packer.conversion.engines import dask_cluster  # the optional extra, only when asked for

    if name == "dask":
        if scheduler is not None and workers is not None:
            raise ValueError("--workers sizes a local Dask cluster; with --scheduler the cluster "
                             "has its own workers")
        with dask_cluster.dask_engine(scheduler, workers=workers) as engine:
            yield engine
        return
    if scheduler is not None or workers is not None:
        raise ValueError(f"--engine {name} starts its own workers: use --jobs and --job-cores, "
                         "not --scheduler or --workers")
    if jobs is None or walltime is None:
        raise ValueError(f"--engine {name} needs --jobs and --walltime")
    with dask_cluster.jobqueue_engine(name, jobs=jobs, queue=queue, walltime=walltime, cores=cores,
                                      memory=memory, account=account) as engine:
        yield engine
