"""Faults during a conversion: each ends with one clear error and a DST that resume=True finishes.

Disk full and read-only storage are real: a small tmpfs (mounted when the test may, as root on
Linux; otherwise those tests skip). Faults inside a worker (a vanished source file, a worker
killed like the OOM killer does, a decoder that segfaults) are injected by monkeypatching,
with workers started by fork so that they inherit the patch.
"""

from __future__ import annotations

import concurrent.futures as cf
import faulthandler
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from imagetools import jpeg_bytes, write_tree

import packer
from packer.cli import cli
from packer.conversion.engines import ExecutorEngine
from packer.conversion.engines import local as workers
from packer.errors import BadImageError, ConversionError, SourceError
from packer.format.backends import Backend
from packer.format.codecs import original as codecs  # where OriginalCodec looks up check_image
from packer.format.manifest import IN_PROGRESS_NAME, MANIFEST_NAME
from packer.source import tree as sourcetree

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SHARD = "2000"


def _tree(root: Path, count: int = 24, size: int = 16) -> Path:
    return write_tree(root, {f"{('ant', 'bee')[i % 2]}/{i:03d}.jpg": jpeg_bytes(size, size, i)
                             for i in range(count)})


def _same_as_clean(dst: Path, src: Path, backend: str, tmp_path: Path) -> None:
    clean = tmp_path / "clean"
    packer.convert(src, clean, to=backend, shard_size=SHARD)
    for shard_a, shard_b in zip(packer.Manifest.load(dst).shards,
                                packer.Manifest.load(clean).shards, strict=True):
        assert shard_a == shard_b
    assert not (dst / IN_PROGRESS_NAME).exists()
    assert packer.verify_dataset(dst, deep=True).ok


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs; the test may remount it larger or read-only."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _remount(mount: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(mount)], check=True)


def test_disk_full_is_one_line_and_resumable(tmp_path: Path, tmpfs: Path, backend: Backend) -> None:
    src = _tree(tmp_path / "src", count=150, size=160)  # about 2.2 MiB of JPEGs: twice the disk
    dst = tmpfs / "dst"
    result = CliRunner().invoke(cli, ["convert", str(src), str(dst), "--to", backend.name,
                                      "--shard-size", "200kB", "--workers", "2", "-q"])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--resume" in lines[0], result.stderr
    # LMDB reports a full disk as an I/O error: packer asks the file system and says so plainly.
    assert "the disk is full" in lines[0], lines[0]
    assert "free on the file system" in lines[0] and "shard needs about" in lines[0], lines[0]
    assert str(dst) in lines[0]
    assert not (dst / MANIFEST_NAME).exists()
    _remount(tmpfs, "size=20m")
    resumed = packer.convert(src, dst, to=backend.name, shard_size="200kB", resume=True)
    assert resumed.manifest.num_samples == 150
    assert packer.verify_dataset(dst, deep=True, against=src).ok


def test_read_only_destination_is_one_line(tmp_path: Path, tmpfs: Path) -> None:
    src = _tree(tmp_path / "src", count=4)
    _remount(tmpfs, "ro")
    result = CliRunner().invoke(cli, ["convert", str(src), str(tmpfs / "dst"), "--to", "lmdb"])
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "Read-only file system" in result.stderr
    assert str(tmpfs / "dst") in result.stderr
    _remount(tmpfs, "rw")
    assert packer.convert(src, tmpfs / "dst", to="lmdb", resume=True).manifest.num_samples == 4


def test_readers_work_on_read_only_storage(tmp_path: Path, tmpfs: Path, backend: Backend) -> None:
    src = _tree(tmp_path / "src", count=6)
    packer.convert(src, tmpfs / "dst", to=backend.name, shard_size=SHARD)
    _remount(tmpfs, "ro")
    ds = packer.open_dataset(tmpfs / "dst", decode=False)
    assert [ds[i][0] for i in range(len(ds))] == [(src / p).read_bytes() for p, _ in ds.samples]
    assert packer.verify_dataset(tmpfs / "dst", deep=True).ok


@pytest.fixture
def forked_workers(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(workers, "START_METHOD", "fork")
    return monkeypatch


def _patch_read(patch: pytest.MonkeyPatch, target: str, action: Any) -> None:
    original = sourcetree.read_source

    def read(path: str) -> bytes:
        if path.endswith(target):
            action(path)
        return original(path)

    patch.setattr(sourcetree, "read_source", read)


def test_source_file_vanishing_mid_run(tmp_path: Path, forked_workers: pytest.MonkeyPatch) -> None:
    src = _tree(tmp_path / "src")
    saved = (src / "bee" / "013.jpg").read_bytes()
    with forked_workers.context() as patch:
        _patch_read(patch, "bee/013.jpg", os.unlink)
        with pytest.raises(SourceError, match=r"013\.jpg.*vanished.*resume=True"):
            packer.convert(src, tmp_path / "dst", to="hdf5", shard_size=SHARD, workers=2)
    assert not (tmp_path / "dst" / MANIFEST_NAME).exists()
    (src / "bee" / "013.jpg").write_bytes(saved)
    packer.convert(src, tmp_path / "dst", to="hdf5", shard_size=SHARD, resume=True)
    _same_as_clean(tmp_path / "dst", src, "hdf5", tmp_path)


def test_worker_killed_like_the_oom_killer(tmp_path: Path, forked_workers: pytest.MonkeyPatch) -> None:
    src = _tree(tmp_path / "src")
    with forked_workers.context() as patch:
        _patch_read(patch, "ant/010.jpg", lambda _: os.kill(os.getpid(), signal.SIGKILL))
        with pytest.raises(ConversionError, match=r"SIGKILL.*out-of-memory.*ant/010\.jpg.*resume=True"):
            packer.convert(src, tmp_path / "dst", to="lmdb", shard_size=SHARD, workers=2)
    assert (tmp_path / "dst" / IN_PROGRESS_NAME).exists()
    assert not list((tmp_path / "dst" / ".tmp").iterdir())
    packer.convert(src, tmp_path / "dst", to="lmdb", shard_size=SHARD, resume=True)
    _same_as_clean(tmp_path / "dst", src, "lmdb", tmp_path)


class _Bar:
    """Stands in for tqdm and remembers where the bar ended."""

    last: _Bar | None = None

    def __init__(self, total: int, **_: Any) -> None:
        self.total, self.n = total, 0
        _Bar.last = self

    def update(self, n: int = 1) -> None:
        self.n += n

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass


def _crash_on(patch: pytest.MonkeyPatch, bad: bytes) -> None:
    original = codecs.check_image

    def check(data: bytes, **kwargs: Any) -> None:
        if data == bad:
            faulthandler.disable()  # pytest's traceback dump would only be noise here
            # At the decoding thread, as a real decoder fault is.
            signal.pthread_kill(threading.get_ident(), signal.SIGSEGV)
        original(data, **kwargs)

    patch.setattr(codecs, "check_image", check)


def test_decoder_crash_skips_the_file_and_the_run_goes_on(
        tmp_path: Path, forked_workers: pytest.MonkeyPatch, backend: Backend) -> None:
    src = _tree(tmp_path / "src")
    bad = (src / "ant" / "006.jpg").read_bytes()
    with forked_workers.context() as patch:
        _crash_on(patch, bad)
        patch.setattr(sys.modules["packer.conversion.execution"], "ProgressBar", _Bar)
        result = packer.convert(src, tmp_path / "dst", to=backend.name, shard_size=SHARD,
                                workers=2, progress=True)
    skipped = [(s.path, s.reason) for s in result.manifest.skipped]
    assert skipped == [("ant/006.jpg", "decode_error")]
    assert "crashed" in result.manifest.skipped[0].detail and "SIGSEGV" in result.manifest.skipped[0].detail
    assert result.manifest.num_samples == 23 and result.found == 24
    assert _Bar.last is not None and _Bar.last.n == _Bar.last.total == 23
    assert packer.verify_dataset(tmp_path / "dst", deep=True, against=src).ok


def test_decoder_crash_under_strict_names_the_file(tmp_path: Path,
                                                   forked_workers: pytest.MonkeyPatch) -> None:
    src = _tree(tmp_path / "src")
    with forked_workers.context() as patch:
        _crash_on(patch, (src / "bee" / "017.jpg").read_bytes())
        with pytest.raises(BadImageError, match=r"017\.jpg.*crashed"):
            packer.convert(src, tmp_path / "dst", to="lmdb", shard_size=SHARD, strict=True)


def _forked_pool() -> cf.ProcessPoolExecutor:
    """A process pool whose workers inherit this process's patches."""
    return cf.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork"))


def test_decoder_crash_on_a_process_pool_is_pinned_and_the_pool_renewed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dead worker breaks a ProcessPoolExecutor: the engine goes on with a fresh pool,
    resubmits the tasks that were in flight, and skips the file once two attempts died on it."""
    src = _tree(tmp_path / "src")
    _crash_on(monkeypatch, (src / "ant" / "006.jpg").read_bytes())
    monkeypatch.setattr(sys.modules["packer.conversion.execution"], "ProgressBar", _Bar)
    with _forked_pool() as pool:
        engine = ExecutorEngine(pool, 2)
        result = packer.convert(src, tmp_path / "dst", to="lmdb", shard_size=SHARD, engine=engine,
                                progress=True)
        assert [(s.path, s.reason) for s in result.manifest.skipped] == [("ant/006.jpg", "decode_error")]
        assert "2 attempts of the task died on this file" in result.manifest.skipped[0].detail
        assert result.manifest.num_samples == 23 and result.found == 24
        assert _Bar.last is not None and _Bar.last.n == _Bar.last.total == 23
        assert not list((tmp_path / "dst").glob(".tmp/**/.current-*"))
        assert packer.verify_dataset(tmp_path / "dst", deep=True, against=src).ok
        # The pool given stays broken; the engine goes on with fresh ones, run after run.
        with pytest.raises(BadImageError, match=r"ant/006\.jpg.*crashed") as caught:
            packer.convert(src, tmp_path / "strict", to="lmdb", shard_size=SHARD, strict=True, engine=engine)
    assert (caught.value.path, caught.value.reason) == ("ant/006.jpg", "decode_error")


def test_a_killed_worker_of_a_process_pool_ends_the_run_naming_its_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _tree(tmp_path / "src")
    _patch_read(monkeypatch, "ant/010.jpg", lambda _: os.kill(os.getpid(), signal.SIGKILL))
    with _forked_pool() as pool, \
            pytest.raises(ConversionError, match=r"SIGKILL.*out-of-memory.*ant/010\.jpg.*resume=True"):
        packer.convert(src, tmp_path / "dst", to="lmdb", shard_size=SHARD, engine=ExecutorEngine(pool, 2))
    assert not (tmp_path / "dst" / MANIFEST_NAME).exists()


def test_progress_bar_ends_at_the_samples_packed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _tree(tmp_path / "src", count=10)
    (src / "ant" / "junk.jpg").write_bytes(b"junk")
    monkeypatch.setattr(sys.modules["packer.conversion.execution"], "ProgressBar", _Bar)
    result = packer.convert(src, tmp_path / "dst", to="lmdb", shard_size=SHARD, progress=True)
    assert _Bar.last is not None and _Bar.last.n == _Bar.last.total == result.manifest.num_samples == 10


def test_verify_cli_names_every_damaged_shard(tmp_path: Path, backend: Backend) -> None:
    src = _tree(tmp_path / "src")
    dst = tmp_path / "dst"
    manifest = packer.convert(src, dst, to=backend.name, shard_size=SHARD).manifest
    first, second = manifest.shards[0].path, manifest.shards[2].path
    data = bytearray((dst / first).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (dst / first).write_bytes(bytes(data))
    (dst / second).unlink()
    runner = CliRunner()
    result = runner.invoke(cli, ["verify", str(dst), "-q"])
    assert result.exit_code == 1
    assert first in result.stdout and second in result.stdout
    doc = json.loads(runner.invoke(cli, ["verify", str(dst), "--json"]).stdout)
    assert doc["ok"] is False
    assert {(p["path"], p["kind"]) for p in doc["problems"]} >= {(first, "checksum_mismatch"),
                                                                  (second, "missing")}
    shutil.rmtree(dst)
    packer.convert(src, dst, to=backend.name, shard_size=SHARD)
    assert runner.invoke(cli, ["verify", str(dst), "--deep", "--against", str(src), "-q"]).exit_code == 0
