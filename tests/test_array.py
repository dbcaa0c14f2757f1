"""Array tasks (``--num-tasks N --task-id I``) and ``packer merge``; tasks write each backend's
very files, the rest (merge, refusals, resume, claims) runs with one backend.

The contract: N tasks, run in any order or at the same time into one DST, then one merge,
give exactly the dataset a single local run gives (only ``created_at`` differs); merge names
what is missing and does nothing on a complete dataset.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from imagetools import dataset_snapshot, mixed_tree

import packer
from packer.cli import cli
from packer.conversion.arrayjob import ArrayTask, array_task
from packer.conversion.plan import shards_of_task
from packer.format.backends import Backend
from packer.format.manifest import IN_PROGRESS_NAME, MANIFEST_NAME

SHARD_SIZE = "1500"  # bytes: the tree below becomes about a dozen shards


def _same_dataset(got: Path, want: Path) -> None:
    assert dataset_snapshot(got) == dataset_snapshot(want)


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return mixed_tree(tmp_path / "src")


def _local(src: Path, tmp_path: Path, backend: str) -> Path:
    dst = tmp_path / "local"
    packer.convert(src, dst, to=backend, shard_size=SHARD_SIZE, workers=1)
    return dst


@pytest.fixture
def local(src: Path, tmp_path: Path, any_backend: Backend) -> Path:
    """``src`` converted in one run. Array tasks, merge and their refusals do not depend on the
    backend (``any_backend``); that tasks write each backend's very files is checked per backend."""
    return _local(src, tmp_path, any_backend.name)


def test_tasks_then_merge_write_each_backend_s_files(src: Path, tmp_path: Path, backend: Backend) -> None:
    _tasks_then_merge(src, _local(src, tmp_path, backend.name), tmp_path, backend, 3)


@pytest.mark.parametrize("num_tasks", [1, 20])
def test_one_task_or_more_tasks_than_shards_equal_a_local_run(src: Path, local: Path, tmp_path: Path,
                                                              any_backend: Backend, num_tasks: int) -> None:
    _tasks_then_merge(src, local, tmp_path, any_backend, num_tasks)


def _tasks_then_merge(src: Path, local: Path, tmp_path: Path, backend: Backend, num_tasks: int) -> None:
    dst = tmp_path / "array"
    shards = len(packer.open_dataset(local).manifest.shards)
    written = []
    for task_id in reversed(range(num_tasks)):  # order does not matter
        result = packer.convert_task(src, dst, task_id=task_id, num_tasks=num_tasks, to=backend.name,
                                     shard_size=SHARD_SIZE, workers=2)
        assert result.shards == tuple(f"shard-{i:05d}" for i in shards_of_task(shards, task_id, num_tasks))
        assert result.written == len(result.shards) and result.kept == 0
        written.extend(result.shards)
        assert not (dst / MANIFEST_NAME).exists()
    assert sorted(written) == [f"shard-{i:05d}" for i in range(shards)]
    assert result.missing == ()
    merged = packer.merge(dst)
    assert not merged.already_complete and merged.manifest.num_samples == 36
    _same_dataset(dst, local)
    assert not (dst / IN_PROGRESS_NAME).exists() and not (dst / ".tmp").exists()
    assert packer.verify_dataset(dst, deep=True, against=src).ok


def test_shards_of_task_partition_every_shard() -> None:
    for shards in (0, 1, 7, 12):
        for tasks in (1, 2, 5, 13):
            owned = [s for t in range(tasks) for s in shards_of_task(shards, t, tasks)]
            assert sorted(owned) == list(range(shards))
    with pytest.raises(ValueError, match="task id"):
        shards_of_task(4, 2, 2)


def test_merge_names_missing_shards_and_their_tasks(src: Path, tmp_path: Path, any_backend: Backend) -> None:
    dst = tmp_path / "array"
    packer.convert_task(src, dst, task_id=1, num_tasks=3, to=any_backend.name, shard_size=SHARD_SIZE,
                        workers=1)
    with pytest.raises(packer.MissingShardsError, match=r"task\(s\) 0,2 of 3") as caught:
        packer.merge(dst)
    plan = json.loads((dst / IN_PROGRESS_NAME).read_text())
    expected = [f"shard-{i:05d}" for i in range(plan["shards"]) if i % 3 != 1]
    assert caught.value.missing == expected
    assert expected[0] in str(caught.value) and "(task 0 of 3)" in str(caught.value)
    assert not (dst / MANIFEST_NAME).exists()
    with pytest.raises(packer.IncompleteDatasetError, match=r"merge\(\)"):
        packer.open_dataset(dst)
    result = CliRunner().invoke(cli, ["merge", str(dst), "-q"])
    assert result.exit_code == 1 and "Error: Cannot merge" in result.output and expected[0] in result.output


def test_merge_removes_a_damaged_shard_so_its_task_rewrites_it(src: Path, local: Path, tmp_path: Path,
                                                               any_backend: Backend) -> None:
    dst = tmp_path / "array"
    for task_id in range(2):
        packer.convert_task(src, dst, task_id=task_id, num_tasks=2, to=any_backend.name,
                            shard_size=SHARD_SIZE, workers=1)
    victim = sorted(dst.glob(f"shard-*{any_backend.suffix}"))[3]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the checksum tells
    victim.write_bytes(bytes(data))
    with pytest.raises(packer.MissingShardsError, match="do not match the checksum") as caught:
        packer.merge(dst)
    assert caught.value.missing == [victim.name] and not victim.exists()
    again = [packer.convert_task(src, dst, task_id=task_id, num_tasks=2, to=any_backend.name,
                                 shard_size=SHARD_SIZE, workers=1) for task_id in range(2)]
    assert sum(r.written for r in again) == 1  # the victim's task writes it again; nothing else
    assert sum(r.kept for r in again) == sum(len(r.shards) for r in again) - 1
    packer.merge(dst)
    _same_dataset(dst, local)


def test_a_rerun_task_keeps_its_finished_shards_and_merge_is_idempotent(src: Path, tmp_path: Path,
                                                                         any_backend: Backend) -> None:
    dst = tmp_path / "array"
    first = packer.convert_task(src, dst, task_id=0, num_tasks=2, to=any_backend.name, shard_size=SHARD_SIZE)
    stamps = {p.name: p.stat().st_mtime_ns for p in dst.glob("shard-*")}
    again = packer.convert_task(src, dst, task_id=0, num_tasks=2, to=any_backend.name, shard_size=SHARD_SIZE)
    assert again.written == 0 and again.kept == first.written
    assert {p.name: p.stat().st_mtime_ns for p in dst.glob("shard-*")} == stamps
    packer.convert_task(src, dst, task_id=1, num_tasks=2, to=any_backend.name, shard_size=SHARD_SIZE)
    packer.merge(dst, verify=False)
    before = (dst / MANIFEST_NAME).read_bytes()
    assert packer.merge(dst).already_complete
    done = packer.convert_task(src, dst, task_id=1, num_tasks=2, to=any_backend.name, shard_size=SHARD_SIZE)
    assert done.already_complete and (dst / MANIFEST_NAME).read_bytes() == before


def test_tasks_refuse_another_plan(src: Path, tmp_path: Path, any_backend: Backend) -> None:
    dst = tmp_path / "array"
    packer.convert_task(src, dst, task_id=0, num_tasks=2, to=any_backend.name, shard_size=SHARD_SIZE)
    with pytest.raises(packer.ResumeError, match="same command"):
        packer.convert_task(src, dst, task_id=1, num_tasks=2, to=any_backend.name, shard_size="3000")
    with pytest.raises(packer.ResumeError, match="num_tasks="):
        packer.convert_task(src, dst, task_id=1, num_tasks=3, to=any_backend.name, shard_size=SHARD_SIZE)
    with pytest.raises(ValueError, match="task id"):
        packer.convert_task(src, dst, task_id=2, num_tasks=2, to=any_backend.name, shard_size=SHARD_SIZE)


def test_resume_finishes_an_array_job_locally(src: Path, local: Path, tmp_path: Path,
                                              any_backend: Backend) -> None:
    dst = tmp_path / "array"
    first = packer.convert_task(src, dst, task_id=0, num_tasks=2, to=any_backend.name, shard_size=SHARD_SIZE)
    result = packer.convert(src, dst, to=any_backend.name, shard_size=SHARD_SIZE, resume=True, workers=1)
    assert result.resumed_shards == first.written
    _same_dataset(dst, local)


def test_merge_refuses_what_is_not_a_conversion(tmp_path: Path) -> None:
    with pytest.raises(packer.NotADatasetError, match="no packer conversion"):
        packer.merge(tmp_path / "nothing")
    empty_marker = tmp_path / "old"
    empty_marker.mkdir()
    (empty_marker / IN_PROGRESS_NAME).write_text("{}\n")
    with pytest.raises(packer.OutputError, match="did not record its plan"):
        packer.merge(empty_marker)


@pytest.mark.slow
def test_tasks_running_at_the_same_time_share_one_dst(src: Path, local: Path, tmp_path: Path,
                                                      any_backend: Backend) -> None:
    """Four `packer convert` processes started together, as a Slurm array would, then merge."""
    dst = tmp_path / "array"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    procs = []
    for task in range(4):
        slurm = {"SLURM_ARRAY_TASK_ID": str(task + 1), "SLURM_ARRAY_TASK_MIN": "1",
                 "SLURM_ARRAY_TASK_MAX": "4", "SLURM_ARRAY_TASK_COUNT": "4"}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "packer", "convert", str(src), str(dst), "--to", any_backend.name,
             "--shard-size", SHARD_SIZE, "--workers", "1", "-q"],
            env={**env, **slurm}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    result = CliRunner().invoke(cli, ["merge", str(dst)])
    assert result.exit_code == 0, result.output
    assert f"into {dst}" in result.output
    _same_dataset(dst, local)


# ---------------------------------------------------------------- which task am I


@pytest.mark.parametrize(("flags", "environ", "expected"), [
    ((None, None), {}, None),
    ((2, 4), {}, ArrayTask(2, 4, "task_id=, num_tasks=")),
    ((2, 4), {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "9"},
     ArrayTask(2, 4, "task_id=, num_tasks=")),
    ((None, None), {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "5", "SLURM_ARRAY_TASK_MAX": "8",
                    "SLURM_ARRAY_TASK_COUNT": "4"}, ArrayTask(2, 4, "SLURM_ARRAY_TASK_ID")),
    ((None, None), {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "1"},
     ArrayTask(0, 1, "SLURM_ARRAY_TASK_ID")),
    ((None, 3), {"JOB_COMPLETION_INDEX": "2"}, ArrayTask(2, 3, "JOB_COMPLETION_INDEX")),
])
def test_array_task_from_flags_then_slurm_then_kubernetes(flags: tuple[int | None, int | None],
                                                          environ: dict[str, str],
                                                          expected: ArrayTask | None) -> None:
    assert array_task(*flags, environ) == expected


@pytest.mark.parametrize(("flags", "environ", "message"), [
    ((None, 4), {}, "num_tasks= needs task_id="),
    ((1, None), {}, "task_id= needs num_tasks="),
    ((4, 4), {}, "not in 0..3"),
    ((None, None), {"JOB_COMPLETION_INDEX": "1"}, "pass num_tasks="),
    ((None, None), {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "6",
                    "SLURM_ARRAY_TASK_STEP": "2", "SLURM_ARRAY_TASK_COUNT": "4"}, "not contiguous"),
    ((None, None), {"SLURM_ARRAY_TASK_ID": "x"}, "not an integer"),
])
def test_array_task_errors_say_what_to_pass(flags: tuple[int | None, int | None], environ: dict[str, str],
                                            message: str) -> None:
    with pytest.raises(ValueError, match=message):
        array_task(*flags, environ)


def test_cli_array_flags_are_usage_errors_when_incomplete(src: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    command = ["convert", str(src), str(tmp_path / "d"), "--to", "lmdb"]
    result = runner.invoke(cli, [*command, "--num-tasks", "2"],
                           env={"SLURM_ARRAY_TASK_ID": None, "JOB_COMPLETION_INDEX": None})
    assert result.exit_code == 2 and "--num-tasks needs --task-id" in result.output
    result = runner.invoke(cli, ["convert", str(src), str(tmp_path / "d"), "--to", "lmdb", "--num-tasks", "2",
                                 "--task-id", "0", "--overwrite"])
    assert result.exit_code == 2 and "never overwrite" in result.output
    result = runner.invoke(cli, ["convert", str(src), str(tmp_path / "d"), "--to", "lmdb", "--num-tasks", "2",
                                 "--task-id", "1", "--shard-size", SHARD_SIZE])
    assert result.exit_code == 0, result.output
    assert "Task 1 of 2" in result.output and "packer merge" in result.output


def test_a_task_starting_while_another_claims_dst_joins_it(src: Path, local: Path, tmp_path: Path,
                                                          any_backend: Backend) -> None:
    """The instant between one task writing its marker aside and linking it into place."""
    from packer.conversion.destination.state import Destination

    dst = tmp_path / "array"
    dst.mkdir()
    (dst / f".{IN_PROGRESS_NAME}.4242.0badc0de.tmp").write_text("{}")
    assert Destination(dst).state == "partial"
    for task_id in range(2):
        packer.convert_task(src, dst, task_id=task_id, num_tasks=2, to=any_backend.name,
                            shard_size=SHARD_SIZE)
    packer.merge(dst)
    assert not list(dst.glob(".*.tmp"))  # merge clears what a killed claimant left
    _same_dataset(dst, local)
