"""The Dask engine: a LocalCluster started inside the test, a worker killed mid-task, and the
Slurm/PBS job scripts rendered without a batch system. Needs the ``dask`` extra; skipped
(saying so) without it. ``import packer`` never imports Dask, tested without it too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from imagetools import dataset_snapshot, mixed_tree

import packer
from packer.cli import cli

SHARD_SIZE = "1500"


def test_import_packer_and_its_cli_do_not_import_dask_or_ray() -> None:
    code = ("import sys, packer, packer.cli, packer.conversion.run, packer.conversion.engines; "
            "from packer.cli import cli; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('dask', 'distributed', 'dask_jobqueue', 'ray')); print(bad); assert not bad")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_without_the_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from packer.conversion.engines import dask_cluster as dask_engine

    monkeypatch.setitem(sys.modules, "distributed", None)
    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)
    with pytest.raises(packer.MissingExtraError, match=r"pip install 'packer-shards\[dask\]'"), \
            dask_engine.dask_engine("tcp://127.0.0.1:1"):
        pass
    with pytest.raises(ImportError, match=r"packer-shards\[dask\]"):
        dask_engine.job_script("slurm", queue=None, walltime="1:00:00")


distributed = pytest.importorskip("distributed", reason="the dask extra is not installed")
pytest.importorskip("dask_jobqueue", reason="the dask extra is not installed")

from packer.conversion.engines.dask_cluster import dask_engine, job_script  # noqa: E402


@pytest.fixture(scope="module")
def cluster() -> Any:
    """Two single-threaded worker processes, started once for the module."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as local:
        yield local


@pytest.mark.slow
def test_the_command_line_converts_on_a_running_cluster(tmp_path: Path, cluster: Any) -> None:
    """A LocalCluster of its own, through the library: the engine contract (test_contracts.py)."""
    src = mixed_tree(tmp_path / "src", count=30)
    with dask_engine(cluster.scheduler_address) as engine:
        assert engine.parallelism == 2
    packer.convert(src, tmp_path / "local5", to="hdf5", shard_size=SHARD_SIZE, workers=1)
    out = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "dask5"), "--to", "hdf5",
                                   "--shard-size", SHARD_SIZE, "--engine", "dask",
                                   "--scheduler", cluster.scheduler_address])
    assert out.exit_code == 0, out.output
    assert dataset_snapshot(tmp_path / "dask5") == dataset_snapshot(tmp_path / "local5")


@pytest.mark.slow
def test_dask_workers_read_archives_and_tables_by_their_readers(tmp_path: Path, cluster: Any) -> None:
    """The readers a shard task carries (an archive's, a table's) travel to Dask workers."""
    from parquet_tools import tree_rows, write_table
    from sourcekinds import write_tar

    src = mixed_tree(tmp_path / "src", count=24)
    packer.convert(src, tmp_path / "local", to="lmdb", shard_size=SHARD_SIZE, workers=1)
    classes, rows = tree_rows(src)
    sources = {"tar": write_tar(src, tmp_path / "src.tar"),
               "parquet": write_table(tmp_path / "src.parquet", rows, classes=classes, row_group_size=5)}
    want = dataset_snapshot(tmp_path / "local")["files"]
    with dask_engine(cluster.scheduler_address) as engine:
        for kind, path in sources.items():
            packer.convert(path, tmp_path / kind, to="lmdb", shard_size=SHARD_SIZE, engine=engine)
            got = dataset_snapshot(tmp_path / kind)["files"]
            assert {k: v for k, v in got.items() if k.startswith("shard-")} == {
                k: v for k, v in want.items() if k.startswith("shard-")}, kind


def _killer_plugin(flag: str) -> Any:
    """A worker plugin that SIGKILLs its own worker the first time any worker starts a task
    (``flag`` is the file that says it happened): a node lost mid-task."""

    class KillFirstTask(distributed.WorkerPlugin):
        idempotent = True

        def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
            if finish != "executing":
                return
            try:
                fd = os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            os.kill(os.getpid(), 9)

    return KillFirstTask()


@pytest.mark.slow
def test_a_worker_killed_mid_task_is_retried_and_the_dataset_verifies(tmp_path: Path, cluster: Any) -> None:
    src = mixed_tree(tmp_path / "src", count=30)
    packer.convert(src, tmp_path / "local", to="lmdb", shard_size=SHARD_SIZE, workers=1)
    flag = tmp_path / "killed"
    with distributed.Client(cluster.scheduler_address) as client:
        client.register_plugin(_killer_plugin(str(flag)), name="kill-first-task")
        try:
            with dask_engine(cluster.scheduler_address) as engine:
                packer.convert(src, tmp_path / "dask", to="lmdb", shard_size=SHARD_SIZE, engine=engine)
        finally:
            client.unregister_worker_plugin("kill-first-task")
        client.wait_for_workers(2, timeout=60)  # the nanny restarted it, for the other tests
    assert flag.exists(), "the plugin never killed a worker: the test proved nothing"
    assert packer.verify_dataset(tmp_path / "dask", deep=True, against=src).ok
    assert dataset_snapshot(tmp_path / "dask") == dataset_snapshot(tmp_path / "local")


def _crash_plugin(bad: bytes) -> Any:
    """A worker plugin that makes the ``original`` codec's image check crash its process
    (SIGSEGV) on the file with bytes ``bad``, in every worker, restarted ones too."""

    class CrashOnFile(distributed.WorkerPlugin):
        idempotent = True

        def setup(self, worker: Any) -> None:
            import faulthandler
            import signal
            import threading

            from packer.format.codecs import original

            check = original.check_image

            def crashing(data: bytes, **kwargs: Any) -> None:
                if data == bad:
                    faulthandler.disable()
                    # At this thread, as a real decoder fault is: os.kill() would let a worker's
                    # other threads take the signal while this one packs the next file.
                    signal.pthread_kill(threading.get_ident(), signal.SIGSEGV)
                check(data, **kwargs)

            original.check_image = crashing  # type: ignore[assignment]

    return CrashOnFile()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_decoder_crash_on_dask_is_pinned_to_its_file(tmp_path: Path) -> None:
    """As on the local engine: the file is skipped as decode_error, the rest of its shard packed."""
    src = mixed_tree(tmp_path / "src", count=12, broken=False)
    victim = sorted(p for p in src.rglob("*") if p.is_file())[5]
    relpath = victim.relative_to(src).as_posix()
    # Its own cluster: workers that crash are restarted by their nannies, which takes a while.
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as local, \
            distributed.Client(local.scheduler_address) as client:
        client.register_plugin(_crash_plugin(victim.read_bytes()), name="crash-on-file")
        with dask_engine(local.scheduler_address) as engine:
            result = packer.convert(src, tmp_path / "dask", to="lmdb", engine=engine)
    assert [(s.path, s.reason) for s in result.manifest.skipped] == [(relpath, "decode_error")]
    assert "crashed the worker process" in result.manifest.skipped[0].detail
    assert result.manifest.num_samples == 11
    assert not list((tmp_path / "dask").glob(".tmp/.current-*"))
    assert packer.verify_dataset(tmp_path / "dask", deep=True, against=src).ok


@pytest.mark.slow
def test_array_tasks_on_dask_then_merge_equal_a_local_run(tmp_path: Path, cluster: Any) -> None:
    src = mixed_tree(tmp_path / "src", count=30)
    packer.convert(src, tmp_path / "local", to="hdf5", shard_size=SHARD_SIZE, workers=1)
    with dask_engine(cluster.scheduler_address) as engine:
        for task_id in range(2):
            packer.convert_task(src, tmp_path / "array", task_id=task_id, num_tasks=2, to="hdf5",
                                shard_size=SHARD_SIZE, engine=engine)
    packer.merge(tmp_path / "array")
    assert dataset_snapshot(tmp_path / "array") == dataset_snapshot(tmp_path / "local")


def test_an_unreachable_scheduler_is_one_clear_error(tmp_path: Path) -> None:
    import dask

    src = mixed_tree(tmp_path / "src", count=3)
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        out = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "d"), "--to", "lmdb",
                                       "--engine", "dask", "--scheduler", "tcp://127.0.0.1:9"])
    assert out.exit_code == 1, out.output
    assert "Cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'" in out.output
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(("kind", "lines"), [
    ("slurm", ["#SBATCH -J packer-convert", "#SBATCH -p gpu-short", "#SBATCH -A proj42",
               "#SBATCH -t 02:30:00", "#SBATCH --cpus-per-task=8", "#SBATCH --exclusive"]),
    ("pbs", ["#PBS -N packer-convert", "#PBS -q gpu-short", "#PBS -A proj42",
             "#PBS -l walltime=02:30:00", "ncpus=8", "#PBS --exclusive"]),
])
def test_job_scripts_render_without_a_batch_system(kind: str, lines: list[str]) -> None:
    script = job_script(kind, queue="gpu-short", walltime="02:30:00", cores=8, memory="32GB",
                        account="proj42", job_extra_directives=("--exclusive",))
    for line in lines:
        assert line in script, script
    assert "--nthreads 1" in script and "--nworkers 8" in script  # one process per core


def test_cli_prints_the_job_script_and_checks_engine_flags(tmp_path: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(cli, ["convert", "src", str(tmp_path / "d"), "--to", "lmdb", "--engine", "slurm",
                              "--partition", "cpu", "--walltime", "1:00:00", "--account", "a1",
                              "--job-cores", "2", "--print-job-script"])
    assert out.exit_code == 0, out.output
    assert "#SBATCH -p cpu" in out.output and "#SBATCH -A a1" in out.output and "--nworkers 2" in out.output
    src = mixed_tree(tmp_path / "src", count=3)
    out = runner.invoke(cli, ["convert", str(src), str(tmp_path / "d"), "--to", "lmdb", "--engine", "slurm",
                              "--partition", "cpu"])
    assert out.exit_code == 2 and "needs --jobs and --walltime" in out.output
    if shutil.which("sbatch") is None:  # not a Slurm login node: say so, rather than wait for ever
        out = runner.invoke(cli, ["convert", str(src), str(tmp_path / "d"), "--to", "lmdb",
                                  "--engine", "slurm", "--jobs", "1", "--walltime", "1:00:00"])
        assert out.exit_code == 1 and "`sbatch`, which is not on PATH" in out.output
    out = runner.invoke(cli, ["convert", str(src), str(tmp_path / "d"), "--to", "lmdb", "--jobs", "3"])
    assert out.exit_code == 2 and "only apply to --engine slurm or --engine pbs" in out.output
    assert not (tmp_path / "d").exists()
