"""The output directory's lifecycle: states, refusals, and the slots that start, claim and finish."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from imagetools import mixed_tree

import packer
from packer.conversion.destination.lifecycle import conversion_slot, task_slot
from packer.conversion.destination.state import Destination, DestinationState
from packer.conversion.job import plan_job
from packer.conversion.options import ConversionOptions
from packer.errors import OutputError, OutputExistsError, ResumeError
from packer.format.manifest import IN_PROGRESS_NAME, MANIFEST_NAME


def test_states_are_told_apart_by_what_dst_holds(tmp_path: Path) -> None:
    assert Destination(tmp_path / "absent").state is DestinationState.EMPTY
    (tmp_path / "empty").mkdir()
    assert Destination(tmp_path / "empty").state is DestinationState.EMPTY
    (tmp_path / "file").write_text("x")
    assert Destination(tmp_path / "file").state is DestinationState.FOREIGN
    other = tmp_path / "other"
    other.mkdir()
    (other / MANIFEST_NAME).write_text(json.dumps({"format": "something else"}))
    assert Destination(other).state is DestinationState.FOREIGN  # a common file name, not ours
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / IN_PROGRESS_NAME).write_text("{}")
    assert Destination(partial).state is DestinationState.PARTIAL
    src = mixed_tree(tmp_path / "src", count=4)
    packer.convert(src, tmp_path / "done", to="lmdb", workers=1)
    assert Destination(tmp_path / "done").state is DestinationState.COMPLETE
    assert Destination(tmp_path / "done").state == "complete"  # compares as its value too


def test_check_refuses_and_touches_nothing(tmp_path: Path) -> None:
    src = mixed_tree(tmp_path / "src", count=4)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(OutputExistsError, match="not empty"):
        Destination(foreign).check(str(src), overwrite=False)
    with pytest.raises(OutputError, match="will not delete or resume it"):
        Destination(foreign).check(str(src), overwrite=True)
    with pytest.raises(OutputError, match="inside the source"):
        Destination(src / "inside").check(str(src), overwrite=False)
    with pytest.raises(OutputError, match="not both"):
        Destination(tmp_path / "new").check(str(src), overwrite=True, resume=True)
    assert (foreign / "notes.txt").read_text() == "keep me"
    assert not (tmp_path / "new").exists()


def test_a_conversion_slot_replaces_a_dataset_and_task_slots_agree_on_one_plan(tmp_path: Path) -> None:
    src = mixed_tree(tmp_path / "src", count=6)
    dst = tmp_path / "dst"
    packer.convert(src, dst, to="hdf5", workers=1)
    job = plan_job(src, dst, ConversionOptions(to="hdf5"), overwrite=True, resume=False, num_tasks=None)
    assert job.state is DestinationState.COMPLETE
    with conversion_slot(job.destination, job.plan, keep=False, expected=job.state) as slot:
        assert slot.kept == {} and Path(slot.staging).is_dir() and not any(Path(slot.staging).iterdir())
        assert job.destination.state is DestinationState.PARTIAL  # manifest gone, marker there
        assert not list(dst.glob("shard-*"))
        assert job.destination.recorded_plan() == job.plan
    # left without a commit: still a conversion in progress, its staging emptied, no lease held
    assert job.destination.state is DestinationState.PARTIAL and not job.destination.live_holders()

    arrays = tmp_path / "arrays"
    options = ConversionOptions(to="lmdb", shard_size="4KB")
    one = plan_job(src, arrays, options, overwrite=False, resume=True, num_tasks=2)
    with task_slot(one.destination, one.plan, 0) as mine, task_slot(one.destination, one.plan, 1) as theirs:
        assert sorted(mine.shards + theirs.shards) == list(range(one.plan.num_shards))
        assert len(one.destination.live_holders()) == 2  # two tasks at once, each with its lease
    other = plan_job(src, arrays, ConversionOptions(to="lmdb", shard_size="8KB"), overwrite=False,
                     resume=True, num_tasks=2)
    with pytest.raises(ResumeError, match="every array task must run the same command"):
        with task_slot(other.destination, other.plan, 0):
            pass
    fewer = plan_job(src, arrays, options, overwrite=False, resume=True, num_tasks=3)
    with pytest.raises(ResumeError, match="same num_tasks="):
        with task_slot(fewer.destination, fewer.plan, 0):
            pass


def test_finish_drops_shard_files_the_manifest_does_not_name(standard_tree: Path, tmp_path: Path) -> None:
    # A shard renamed in by a run killed before its receipt, whose redo came out otherwise
    # (a decoder crash pinned on one of its files), is named by no manifest: finish drops it.
    dst = tmp_path / "dst"
    manifest = packer.convert(standard_tree, dst, to="lmdb", shard_size=3000).manifest
    stray = dst / "shard-0123456789abcdef.lmdb"
    stray.write_bytes(b"an orphan")
    job = plan_job(standard_tree, dst, ConversionOptions(to="lmdb", shard_size=3000), overwrite=False,
                   resume=True, num_tasks=None)
    with conversion_slot(job.destination, job.plan, keep=True, expected=job.state) as slot:
        slot.commit(lambda: manifest)
    assert not stray.exists()
    assert all((dst / shard.path).is_file() for shard in manifest.shards)
    assert packer.verify_dataset(dst).ok
