"""Crash safety and resume: real `packer convert` processes killed at chosen points, then resumed.

Each kill point is reached by running the real command line in a child Python that wraps one
packer function so that the process SIGKILLs itself right there (no sleeps, no races); one test
also kills a running `packer convert` from outside. After every kill the directory must look
incomplete to readers, and `--resume` must end with exactly the dataset an uninterrupted run
gives: same shard bytes, same sample index, same manifest apart from `created_at`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from imagetools import dataset_snapshot, mixed_tree, png_bytes

import packer
from packer.cli import cli
from packer.errors import IncompleteDatasetError, OutputExistsError, ResumeError
from packer.format.backends import get_backend
from packer.format.manifest import IN_PROGRESS_NAME, MANIFEST_NAME

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SHARD_SIZE = "1500"  # bytes: the tree below becomes about a dozen shards


def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path (a partial dataset has no manifest yet)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _assert_same_dataset(got: Path, want: Path) -> None:
    assert dataset_snapshot(got) == dataset_snapshot(want)


def _killed_run(src: Path, dst: Path, backend: str, patch: str,
                *extra: str) -> subprocess.CompletedProcess[str]:
    """Run `packer convert` in a child that applies ``patch`` (Python) first."""
    code = textwrap.dedent(f"""
        import os, signal, sys
        import packer.conversion.destination.lifecycle, packer.conversion.engines.local
        import packer.format.manifest
        life = sys.modules["packer.conversion.destination.lifecycle"]
        man = sys.modules["packer.format.manifest"]
        engines = sys.modules["packer.conversion.engines.local"]
        def die():
            os.kill(os.getpid(), signal.SIGKILL)
        {textwrap.indent(textwrap.dedent(patch), '        ').strip()}
        from packer.cli import main
        sys.argv = ["packer", "convert", {str(src)!r}, {str(dst)!r}, "--to", {backend!r},
                    "--shard-size", {SHARD_SIZE!r}, "-q", *{list(extra)!r}]
        main()
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=240, check=False)


KILL_POINTS = {
    # right after DST was marked in progress: nothing written yet
    "early": """
        start = life._open
        def patched(*args, **kwargs):
            start(*args, **kwargs)
            die()
        life._open = patched
    """,
    # after the second finished task (a shard, or a segment of one) came back from the workers
    "mid": """
        run = engines.run_shard_tasks
        def patched(tasks, *, workers, on_progress, on_result):
            seen = []
            def result(r):
                follow_ups = on_result(r)
                seen.append(r)
                if len(seen) == 2:
                    die()
                return follow_ups
            return run(tasks, workers=workers, on_progress=on_progress, on_result=result)
        engines.run_shard_tasks = patched
    """,
    # while index.json is being written: half of its temporary file is on disk
    "manifest": """
        def patched(path, data):
            if path.endswith("index.json"):
                name = "." + os.path.basename(path) + f".{os.getpid()}.tmp"
                tmp = os.path.join(os.path.dirname(path), name)
                with open(tmp, "wb") as handle:
                    handle.write(data[: len(data) // 2])
                die()
        man.atomic_write_bytes = patched
    """,
}


# "mid", for every backend and a plugin's: the backend contract (packer.testing.datasets).
@pytest.mark.parametrize("point", ["early", "manifest"])
def test_sigkill_then_resume_equals_an_uninterrupted_run(tmp_path: Path, point: str) -> None:
    backend = get_backend("lmdb")  # the points are the destination's and the manifest's
    src = mixed_tree(tmp_path / "src")
    clean = tmp_path / "clean"
    packer.convert(src, clean, to=backend.name, shard_size=SHARD_SIZE, workers=2)

    dst = tmp_path / "dst"
    killed = _killed_run(src, dst, backend.name, KILL_POINTS[point], "--workers", "2")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (dst / IN_PROGRESS_NAME).exists() and not (dst / MANIFEST_NAME).exists()
    with pytest.raises(IncompleteDatasetError, match="incomplete"):
        packer.open_dataset(dst)
    runner = CliRunner()
    info = runner.invoke(cli, ["info", str(dst)])
    assert info.exit_code == 1 and "incomplete" in info.stderr and "--resume" in info.stderr

    shards_before = {p.name: p.stat().st_mtime_ns for p in dst.glob("shard-*")}
    plain = runner.invoke(cli, ["convert", str(src), str(dst), "--to", backend.name,
                                "--shard-size", SHARD_SIZE])
    assert plain.exit_code == 3
    assert "--resume" in plain.stderr and "--overwrite" in plain.stderr
    assert {p.name: p.stat().st_mtime_ns for p in dst.glob("shard-*")} == shards_before

    packer.convert(src, dst, to=backend.name, shard_size=SHARD_SIZE, resume=True, workers=2)
    _assert_same_dataset(dst, clean)
    assert len(packer.open_dataset(dst)) == 36


def test_killed_from_outside_mid_run_then_resumed(tmp_path: Path) -> None:
    src = mixed_tree(tmp_path / "src", count=150)
    clean = tmp_path / "clean"
    packer.convert(src, clean, to="lmdb", shard_size=SHARD_SIZE, workers=1)
    dst = tmp_path / "dst"
    proc = subprocess.Popen([sys.executable, "-m", "packer", "convert", str(src), str(dst),
                             "--to", "lmdb", "--shard-size", SHARD_SIZE, "--workers", "1", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 120
    # A shard counts as finished once its receipt is written (right after its rename).
    while (not list(dst.glob(".receipts/*.json")) and proc.poll() is None
           and time.monotonic() < deadline):
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)  # the coordinator and its workers, like a preempted node
    proc.wait()
    if (dst / MANIFEST_NAME).exists():
        pytest.skip("the conversion finished before it could be killed")
    resumed = packer.convert(src, dst, to="lmdb", shard_size=SHARD_SIZE, resume=True, workers=2)
    assert resumed.resumed_shards >= 1
    _assert_same_dataset(dst, clean)


def test_resume_refuses_other_options_and_a_changed_tree(tmp_path: Path) -> None:
    src = mixed_tree(tmp_path / "src")
    dst = tmp_path / "dst"
    killed = _killed_run(src, dst, "hdf5", KILL_POINTS["mid"], "--workers", "1")
    assert killed.returncode == -signal.SIGKILL
    before = _files(dst)
    with pytest.raises(ResumeError, match="options differ: shard_size was 1500, now 3000.*overwrite=True"):
        packer.convert(src, dst, to="hdf5", shard_size="3000", resume=True)
    with pytest.raises(ResumeError, match="options differ: .*check"):
        packer.convert(src, dst, to="hdf5", shard_size=SHARD_SIZE, check="header", resume=True)
    (src / "cow" / "new.png").write_bytes(png_bytes(9, 9, 500))
    with pytest.raises(ResumeError, match="source tree changed"):
        packer.convert(src, dst, to="hdf5", shard_size=SHARD_SIZE, resume=True)
    assert _files(dst) == before
    result = runner_convert(src, dst, "hdf5", "--overwrite")
    assert result.exit_code == 0, result.output
    assert len(packer.open_dataset(dst)) == 37


def runner_convert(src: Path, dst: Path, backend: str, *extra: str) -> Any:
    return CliRunner().invoke(cli, ["convert", str(src), str(dst), "--to", backend,
                                    "--shard-size", SHARD_SIZE, *extra])


def test_resume_on_nothing_starts_and_on_a_complete_dataset_does_nothing(tmp_path: Path) -> None:
    src = mixed_tree(tmp_path / "src", count=9)
    dst = tmp_path / "dst"
    first = packer.convert(src, dst, to="lmdb", shard_size=SHARD_SIZE, resume=True)
    assert first.manifest.num_samples == 9 and first.resumed_shards == 0
    stamp = (dst / MANIFEST_NAME).stat().st_mtime_ns
    again = runner_convert(src, dst, "lmdb", "--resume")
    assert again.exit_code == 0
    assert "already complete" in again.stdout
    assert (dst / MANIFEST_NAME).stat().st_mtime_ns == stamp
    other = runner_convert(src, dst, "lmdb", "--resume", "--check", "none")
    assert other.exit_code == 1 and "--overwrite" in other.stderr
    both = runner_convert(src, dst, "lmdb", "--resume", "--overwrite")
    assert both.exit_code == 1 and "not both" in both.stderr


def test_ctrl_c_stops_promptly_keeps_shards_and_says_how_to_resume(tmp_path: Path) -> None:
    src = mixed_tree(tmp_path / "src", count=150)
    dst = tmp_path / "dst"
    proc = subprocess.Popen([sys.executable, "-m", "packer", "convert", str(src), str(dst),
                             "--to", "hdf5", "--shard-size", SHARD_SIZE, "--workers", "2", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(dst.glob("shard-*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
    sent = time.monotonic()
    _, stderr = proc.communicate(timeout=60)
    if (dst / MANIFEST_NAME).exists():
        pytest.skip("the conversion finished before Ctrl-C arrived")
    assert time.monotonic() - sent < 15
    assert proc.returncode == 130, stderr
    assert "--resume" in stderr and len(stderr.strip().splitlines()) == 1
    kept = list(dst.glob("shard-*"))
    assert kept
    assert not list((dst / ".tmp").iterdir())
    resumed = packer.convert(src, dst, to="hdf5", shard_size=SHARD_SIZE, resume=True)
    assert resumed.resumed_shards >= len(kept) - 2 and resumed.manifest.num_samples == 150


def test_plain_rerun_over_partial_dst_changes_nothing(tmp_path: Path) -> None:
    src = mixed_tree(tmp_path / "src", count=9)
    dst = tmp_path / "dst"
    assert _killed_run(src, dst, "lmdb", KILL_POINTS["mid"]).returncode == -signal.SIGKILL
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in dst.rglob("*") if p.is_file()}
    with pytest.raises(OutputExistsError, match="interrupted conversion.*resume=True.*overwrite=True"):
        packer.convert(src, dst, to="lmdb", shard_size=SHARD_SIZE)
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in dst.rglob("*") if p.is_file()} == before


def test_segments_plan_covers_every_item_once() -> None:
    from packer.conversion.scheduling import SEGMENTS_PER_WORKER, make_tasks
    from packer.conversion.tasks import SegmentTask, ShardTask
    from packer.format.codecs import OriginalCodec
    from packer.source.base import SourceItem
    from packer.source.tree import FileReader

    items = tuple(SourceItem(f"c/{i}.jpg", 0, 100 + i, 1) for i in range(50))
    shard = ShardTask(0, "shard-00000", FileReader("/src"), "/dst", "/dst/.tmp", "lmdb", OriginalCodec(),
                      "full", 10, False, sum(item.size for item in items), items, "fp", "inputs", {})
    assert make_tasks([shard], 1) == [shard]
    tasks = make_tasks([shard], 2)
    assert all(isinstance(t, SegmentTask) for t in tasks)
    assert len(tasks) == pytest.approx(2 * SEGMENTS_PER_WORKER, abs=1)
    covered = [i for t in tasks if isinstance(t, SegmentTask) for i in range(t.start, t.stop)]
    assert covered == list(range(50))


def test_spawned_workers_give_the_same_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from packer.conversion.engines import local as workers

    src = mixed_tree(tmp_path / "src")
    monkeypatch.setattr(workers, "START_METHOD", "fork")
    packer.convert(src, tmp_path / "fork", to="lmdb", shard_size=SHARD_SIZE, workers=2)
    monkeypatch.setattr(workers, "START_METHOD", "spawn")
    packer.convert(src, tmp_path / "spawn", to="lmdb", shard_size=SHARD_SIZE, workers=2)
    _assert_same_dataset(tmp_path / "spawn", tmp_path / "fork")


def test_start_method_follows_the_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    from packer.conversion.engines import local as workers

    monkeypatch.setattr(workers, "START_METHOD", None)
    monkeypatch.setattr(workers.threading, "active_count", lambda: 1)
    assert workers._start_method() == "fork"
    monkeypatch.setattr(workers.threading, "active_count", lambda: 3)  # e.g. torch's threads
    assert workers._start_method() == "spawn"
    monkeypatch.setattr(workers, "START_METHOD", "forkserver")
    assert workers._start_method() == "forkserver"
