"""Choose and open an engine by name: what ``packer convert --engine NAME`` does.

Engines are named in one :class:`~packer.registry.Registry` of openers: an opener takes the
command line's engine options (:class:`EngineRequest`), refuses those that do not fit it, and
yields an open :class:`Engine`. A plugin registers its own with :func:`register_engine` (or an
entry point in the ``packer.engines`` group).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

from packer.conversion.engines.base import Engine
from packer.conversion.engines.local import LocalEngine
from packer.cpus import available_cpus
from packer.registry import Lazy, Registry

__all__ = ["ENGINES", "EngineOpener", "EngineRequest", "engine_names", "open_engine", "register_engine"]


@dataclass(frozen=True)
class EngineRequest:
    """The engine options of ``packer convert`` (``None``: not given)."""

    workers: int | None = None
    scheduler: str | None = None
    jobs: int | None = None
    queue: str | None = None
    walltime: str | None = None
    account: str | None = None
    cores: int = 4
    memory: str = "16GB"

    def batch_options(self) -> list[str]:
        """The batch-system options that were given, by keyword."""
        given = {"jobs": self.jobs, "queue": self.queue, "walltime": self.walltime, "account": self.account}
        return [name for name, value in given.items() if value is not None]


def _keywords(names: list[str]) -> str:
    """``jobs=, walltime=``: option names as messages spell them."""
    return ", ".join(f"{name}=" for name in names)


_BATCH = 'open_engine("slurm") or open_engine("pbs")'


EngineOpener = Callable[[EngineRequest], AbstractContextManager[Engine]]


@contextmanager
def open_local(request: EngineRequest) -> Iterator[Engine]:
    """``local``: ``workers`` processes on this machine."""
    wrong = request.batch_options() + (["scheduler"] if request.scheduler is not None else [])
    if wrong:
        engines = 'open_engine("dask")' if wrong == ["scheduler"] else _BATCH
        raise ValueError(f"{_keywords(wrong)} only apply to {engines}")
    yield LocalEngine(request.workers or available_cpus())


@contextmanager
def open_dask(request: EngineRequest) -> Iterator[Engine]:
    """``dask``: the cluster at ``scheduler``, or a ``LocalCluster`` of ``workers`` processes."""
    from packer.conversion.engines import dask_cluster  # the optional extra, only when asked for

    if request.batch_options():
        raise ValueError(f"{_keywords(request.batch_options())} only apply to {_BATCH}")
    if request.scheduler is not None and request.workers is not None:
        raise ValueError("workers= sizes a local Dask cluster; with scheduler= the cluster "
                         "has its own workers")
    with dask_cluster.dask_engine(request.scheduler, workers=request.workers) as engine:
        yield engine


def _batch_opener(kind: str) -> EngineOpener:
    @contextmanager
    def open_batch(request: EngineRequest) -> Iterator[Engine]:
        from packer.conversion.engines import dask_cluster

        if request.scheduler is not None or request.workers is not None:
            raise ValueError(f'open_engine("{kind}") starts its own workers: use jobs= and cores=, '
                             "not scheduler= or workers=")
        if request.jobs is None or request.walltime is None:
            raise ValueError(f'open_engine("{kind}") needs jobs= and walltime=')
        with dask_cluster.jobqueue_engine(kind, jobs=request.jobs, queue=request.queue,
                                          walltime=request.walltime, cores=request.cores,
                                          memory=request.memory, account=request.account) as engine:
            yield engine

    open_batch.__doc__ = f"``{kind}``: batch jobs of Dask workers (``jobs``, ``walltime``, ...)."
    return open_batch


open_slurm = _batch_opener("slurm")
open_pbs = _batch_opener("pbs")

#: Engine names for :func:`open_engine` (and ``packer convert --engine``), in the order shown.
ENGINES: Registry[EngineOpener] = Registry("engine", entry_points="packer.engines", builtins={
    "local": Lazy("packer.conversion.engines.select:open_local"),
    "dask": Lazy("packer.conversion.engines.select:open_dask", "dask"),
    "slurm": Lazy("packer.conversion.engines.select:open_slurm", "dask"),
    "pbs": Lazy("packer.conversion.engines.select:open_pbs", "dask"),
})


def engine_names() -> tuple[str, ...]:
    """Every engine name :func:`open_engine` takes, built-ins first."""
    return ENGINES.names(sort=False)


def register_engine(name: str, opener: EngineOpener, *, replace: bool = False) -> None:
    """Make ``open_engine(name)`` (and ``packer convert --engine NAME``) open an engine.

    ``opener(request)`` gets the engine options as an :class:`EngineRequest`, refuses with a
    ``ValueError`` those that do not fit it, and returns a context manager of an open
    :class:`Engine` (a function decorated with :func:`contextlib.contextmanager`).

    Raises:
        ValueError: the name is taken and ``replace`` is off.
    """
    ENGINES.register(name, opener, replace=replace)


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
        UnknownNameError: unknown name (the message lists the choices; also a LookupError).
        ValueError: options that do not fit the engine (the message says which).
        MissingExtraError: the engine's extra is not installed.
    """
    opener = ENGINES.get(name)
    request = EngineRequest(workers=workers, scheduler=scheduler, jobs=jobs, queue=queue,
                            walltime=walltime, account=account, cores=cores, memory=memory)
    with opener(request) as engine:
        yield engine
