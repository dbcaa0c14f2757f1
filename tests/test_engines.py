"""The executor boundary: any ``concurrent.futures`` executor writes the same dataset.

Shard tasks are idempotent and their results plain data, so a ``ProcessPoolExecutor`` (or
Dask's executor, see test_dask.py) gives byte for byte what the built-in pool gives, with
failures reported as the local engine reports them: the engine contract checks that for every
engine (tests/test_contracts.py); here, what is particular to ``ExecutorEngine``.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from imagetools import dataset_snapshot, mixed_tree

import packer
from packer.conversion.engines import ExecutorEngine, LocalEngine, Progress, open_engine
from packer.conversion.engines.base import TaskFailure
from packer.conversion.engines.executor import execute_task
from packer.errors import MissingShardsError, UnknownNameError
from packer.format.backends import Backend
from packer.format.manifest import MANIFEST_NAME

SHARD_SIZE = "1500"


class Recording:
    """A ProgressChannel kept in this process (thread executors share it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reports: list[tuple[str, int, int]] = []

    def reporter(self, key: str) -> Callable[[int, int], None]:
        def report(packed: int, skipped: int) -> None:
            with self.lock:
                self.reports.append((key, packed, skipped))
        return report

    def drain(self) -> list[tuple[str, int, int]]:
        with self.lock:
            reports, self.reports = self.reports, []
        return reports


@pytest.mark.parametrize("parallelism", [1, 4])  # 4 > shards of the small tree: segments
def test_thread_executor_with_progress_reports_every_file_once(tmp_path: Path, parallelism: int) -> None:
    src = mixed_tree(tmp_path / "src", count=12)
    shard_size = "1500" if parallelism == 1 else "1MB"
    events: list[Progress] = []
    channel = Recording()
    executor = ExecutorEngine(cf.ThreadPoolExecutor(parallelism), parallelism, channel=channel)
    packer.convert(src, tmp_path / "local", to="lmdb", shard_size=shard_size, workers=1)

    class Listening:  # an engine that records the progress records the executor engine sends
        name = "listening"
        parallelism = executor.parallelism

        def run(self, tasks: list[Any], *, on_progress: Any, on_result: Any) -> None:
            def record(progress: Progress) -> None:
                events.append(progress)
                on_progress(progress)
            executor.run(tasks, on_progress=record, on_result=on_result)

    try:
        packer.convert(src, tmp_path / "pool", to="lmdb", shard_size=shard_size,
                       engine=Listening(), progress=True)
    finally:
        executor.executor.shutdown()
    net = sum(-p.packed if p.retracted else p.packed for p in events)
    skipped = sum(-p.skipped if p.retracted else p.skipped for p in events)
    assert (net, skipped) == (12, 1)
    assert dataset_snapshot(tmp_path / "pool") == dataset_snapshot(tmp_path / "local")


class Broken(cf.ThreadPoolExecutor):
    """An executor that loses every task (as Dask does after too many dead workers)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        future: cf.Future[Any] = cf.Future()
        future.set_exception(RuntimeError("worker lost three times"))
        return future


def test_a_lost_task_names_its_shard_and_the_way_on(tmp_path: Path, backend: Backend) -> None:
    src = mixed_tree(tmp_path / "src", count=6, broken=False)
    with Broken(1) as pool, pytest.raises(packer.ConversionError, match=r"shard-00000.*resume=True"):
        packer.convert(src, tmp_path / "dst", to=backend.name, engine=ExecutorEngine(pool, 1, name="test"))
    assert not (tmp_path / "dst" / MANIFEST_NAME).exists()


def test_execute_task_returns_failures_as_themselves(tmp_path: Path) -> None:
    class Exploding:  # a stand-in ShardTask: no staging dir, so no crash breadcrumb
        name = "shard-00000.lmdb"
        staging = ""

        def __init__(self, error: Exception) -> None:
            self.error = error

        def run(self, notify: Callable[[str, str], None]) -> None:
            raise self.error

    kind, failure = execute_task(Exploding(KeyError("a bug")))  # type: ignore[arg-type]
    assert kind == "error" and isinstance(failure, TaskFailure)
    assert isinstance(failure.error, KeyError) and "KeyError: 'a bug'" in failure.trace
    error = MissingShardsError("shards missing", missing=["shard-00002"])
    kind, failure = execute_task(Exploding(error))  # type: ignore[arg-type]
    assert failure.error is error and failure.trace == ""


def test_engine_options_must_fit_the_engine() -> None:
    with pytest.raises(ValueError, match="jobs="), open_engine("local", jobs=2):
        pass
    with pytest.raises(ValueError, match=r'open_engine\("dask"\)'), open_engine("local", scheduler="tcp://x:1"):
        pass
    with pytest.raises(UnknownNameError, match="Unknown engine 'ray'; available: dask, local, pbs, slurm"), \
            open_engine("ray"):
        pass
    with open_engine("local", workers=3) as engine:
        assert isinstance(engine, LocalEngine) and engine.parallelism == 3
    with pytest.raises(ValueError, match="not both"):
        packer.convert("src", "dst", to="lmdb", workers=2, engine=LocalEngine(2))
    with pytest.raises(TypeError, match=r"open_engine\('dask'\)"):
        packer.convert("src", "dst", to="lmdb", engine="dask")  # type: ignore[arg-type]
