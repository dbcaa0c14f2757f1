"""``packer update`` under fire: killed at any instant, and run under a training job's readers.

A killed update must leave the previous version complete and readable, and running the same
update again must end with exactly what an uninterrupted update gives. A DataLoader whose
persistent workers read version 1 must keep reading version 1 while an update and a ``gc``
that keeps it run, and so must workers started afterwards.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from imagetools import dataset_snapshot, digest_collate, sha
from test_update import _add_to_one_class, _change_one, _remove_across_classes, convert, make_source

import packer
from packer.format.manifest import MANIFEST_NAME, Manifest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _edit(src: Path) -> None:
    _add_to_one_class(src)
    _remove_across_classes(src)
    _change_one(src)


def _contents(dst: Path) -> Counter[tuple[str, int]]:
    """What the current version of ``dst`` holds, as a multiset of (payload digest, label)."""
    ds = packer.open_dataset(dst, decode=False)
    return Counter((sha(ds[i][0]), ds[i][1]) for i in range(len(ds)))


def _update_command(src: Path, dst: Path) -> list[str]:
    return [sys.executable, "-m", "packer", "update", str(src), str(dst), "--workers", "1", "-q"]


def _killed_in(src: Path, dst: Path, patch: str) -> subprocess.CompletedProcess[str]:
    """`packer update` in a child that applies ``patch`` first and SIGKILLs itself there."""
    code = textwrap.dedent(f"""
        import os, signal, sys
        import packer.conversion.scheduling as scheduling, packer.format.manifest as man
        def die():
            os.kill(os.getpid(), signal.SIGKILL)
        {textwrap.indent(textwrap.dedent(patch), '        ').strip()}
        from packer.cli import main
        sys.argv = ["packer", "update", {str(src)!r}, {str(dst)!r}, "--workers", "1", "-q"]
        main()
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                          check=False)


# Killed after the first new shard and its receipt are in DST: the backend contract, for every
# backend and a plugin's (packer.testing.datasets).
KILL_POINTS = {
    # the new version's manifest kept in versions/, index.json not yet switched
    "before_the_switch": """
        write = man.atomic_write_bytes
        def patched(path, data):
            if path.endswith(man.MANIFEST_NAME):
                die()
            write(path, data)
        man.atomic_write_bytes = patched
    """,
}


@pytest.fixture
def updated_reference(tmp_path: Path) -> tuple[Path, Path, dict[str, object]]:
    """A source, a dataset of it, the source edited, and the snapshot of an uninterrupted update
    (after gc) of another copy: what every interrupted-then-finished update must equal."""
    src = make_source(tmp_path / "src")
    dst, reference = tmp_path / "dst", tmp_path / "reference"
    convert(src, dst, "lmdb")
    convert(src, reference, "lmdb")
    _edit(src)
    packer.update(src, reference, workers=1)
    packer.collect_garbage(reference)
    return src, dst, dataset_snapshot(reference)


@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_killed_at_a_point_keeps_version_1_and_a_rerun_finishes(
        updated_reference: tuple[Path, Path, dict[str, object]], point: str) -> None:
    src, dst, reference = updated_reference
    version_1 = _contents(dst)
    killed = _killed_in(src, dst, KILL_POINTS[point])
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert Manifest.load(dst).version == 1 and _contents(dst) == version_1
    assert packer.verify_dataset(dst).ok
    info = subprocess.run([sys.executable, "-m", "packer", "info", str(dst)], capture_output=True,
                          text=True, check=True)
    assert "an update is running or was interrupted" in info.stdout
    packer.update(src, dst, workers=1)
    packer.collect_garbage(dst)
    assert dataset_snapshot(dst) == reference


Reference = tuple[Path, Path, dict[str, object]]


def test_killed_at_random_instants_then_rerun(updated_reference: Reference) -> None:
    src, dst, reference = updated_reference
    version_1 = _contents(dst)
    started = time.monotonic()
    subprocess.run([*_update_command(src, dst), "--dry-run"], check=True, capture_output=True)
    whole = time.monotonic() - started + 0.5  # about what one run of the command takes
    rng = random.Random(12)
    for _ in range(4):
        proc = subprocess.Popen(_update_command(src, dst), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        time.sleep(rng.uniform(0.2, whole))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        version = Manifest.load(dst).version
        assert version in (1, 2)
        if version == 1:  # not switched yet: version 1, whole
            assert _contents(dst) == version_1
        assert packer.verify_dataset(dst).ok
        if version == 2:
            break
    packer.update(src, dst, workers=1)
    packer.collect_garbage(dst)
    assert dataset_snapshot(dst) == reference


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_persistent_workers_read_version_1_through_an_update_and_gc(tmp_path: Path,
                                                                    start_method: str) -> None:
    from torch.utils.data import DataLoader

    src, dst = make_source(tmp_path / "src"), tmp_path / "dst"
    convert(src, dst, "lmdb")
    ds = packer.open_dataset(dst, decode=False)
    ds[0]  # the parent has read before the workers start, as a training script may
    expected = Counter((sha(ds[i][0]), ds[i][1]) for i in range(len(ds)))
    loader = DataLoader(ds, batch_size=5, num_workers=2, persistent_workers=True,
                        multiprocessing_context=start_method, collate_fn=digest_collate)

    def epoch(over: DataLoader) -> Counter[tuple[str, int]]:
        return Counter(pair for batch in over for pair in batch)

    assert epoch(loader) == expected
    _edit(src)
    updated = packer.update(src, dst, workers=1)
    assert updated.version == 2 and updated.shards_written >= 1
    assert epoch(loader) == expected  # the same workers, mid-training
    packer.collect_garbage(dst, keep_versions=2)
    assert epoch(loader) == expected
    fresh_workers = DataLoader(ds, batch_size=5, num_workers=2, multiprocessing_context=start_method,
                               collate_fn=digest_collate)
    assert epoch(fresh_workers) == expected  # started after the switch: still version 1
    assert _contents(dst) != expected and Manifest.load(dst).version == 2
    assert (dst / MANIFEST_NAME).exists()

