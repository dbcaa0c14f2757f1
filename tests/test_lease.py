"""Leases that hold across hosts: one winner among holders that cannot share ``flock``, killed
and expired holders taken over with a message, renewal, and every writer taking part (convert,
array tasks, merge, update, gc, push), with ``info`` naming the holder."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from imagetools import mixed_tree, png_bytes

import packer
from packer.cli.formatting.dataset import format_info
from packer.conversion.destination.lock import dataset_lock
from packer.errors import DatasetBusyError
from packer.store import open_store
from packer.store.lease.claim import LEASE_DIR, acquire_lease, held_lease, lease_holders
from packer.store.lease.holder import LeaseHolder
from packer.store.local import LocalStore
from packer.tools.info import dataset_info
from packer.tools.publish import collect_remote_garbage, push_dataset


def _foreign_record(*, expired: bool, command: str = "update", host: str = "node-elsewhere",
                    pid: int = 4242) -> bytes:
    """A lease record written by a process on another machine."""
    now = time.time()
    expires = now - 180 if expired else now + 600
    return LeaseHolder(host, pid, command, "f" * 32, now - 300, expires, "another-machine").to_bytes()


def _plant(dst: Path, record: bytes) -> None:
    (dst / LEASE_DIR).mkdir(parents=True, exist_ok=True)
    (dst / LEASE_DIR / "exclusive.json").write_bytes(record)


def _contend(root: str, host: int, barrier: Any, results: Any, through_dst: bool) -> None:
    """One holder on its own "host": take the lease when all start together, hold it a moment
    (``through_dst``: as ``update`` takes it, with ``flock`` doing nothing, as on NFS across hosts)."""
    import packer.store.filelock as filelock
    import packer.store.lease.holder as records

    records.this_machine = lambda: f"machine-{host}"  # no pid of another "host" can be checked
    records.socket.gethostname = lambda: f"host-{host}"
    filelock.fcntl.flock = lambda fd, mode: None  # type: ignore[assignment]
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    holding = dataset_lock(root, "update") if through_dst else held_lease(LocalStore(root), f"writer {host}")
    barrier.wait()
    try:
        with holding:
            results.put(("won", host))
            time.sleep(0.3)  # everyone else tries while this one holds it
    except DatasetBusyError:
        results.put(("busy", host))


@pytest.mark.slow
@pytest.mark.parametrize("stale", [False, True], ids=["free", "stale"])
def test_holders_that_cannot_share_flock_never_both_win(tmp_path: Path, stale: bool) -> None:
    # Eight processes posing as eight hosts, whose flock excludes nothing, race for one lease,
    # free or held by a dead holder of a ninth host, ten times over; the stale case goes through
    # dataset_lock, as update and gc take it.
    context = multiprocessing.get_context("fork")
    for round_ in range(10):
        root = tmp_path / f"round-{round_}"
        if stale:
            _plant(root, _foreign_record(expired=True))
        barrier, results = context.Barrier(8), context.Queue()
        workers = [context.Process(target=_contend, args=(str(root), host, barrier, results, stale))
                   for host in range(8)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        outcomes = [results.get(timeout=10) for _ in workers]
        assert sorted(kind for kind, _ in outcomes).count("won") == 1, outcomes
        assert lease_holders(LocalStore(root)) == []  # released, and the stale one is gone
        left = os.listdir(root / LEASE_DIR) if (root / LEASE_DIR).exists() else []
        assert not [name for name in left if not name.endswith(".tmp")]


def test_an_expired_lease_of_another_host_is_taken_over_with_a_message(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    src, dst = mixed_tree(tmp_path / "src", count=4, broken=False), tmp_path / "dst"
    packer.convert(src, dst, to="lmdb", workers=1)
    _plant(dst, _foreign_record(expired=False))
    with pytest.raises(DatasetBusyError, match=r"Cannot collect garbage in .*: it is in use by update by "
                                                r"host node-elsewhere pid 4242 since .* UTC \(lease until "):
        packer.collect_garbage(dst)
    _plant(dst, _foreign_record(expired=True))
    with caplog.at_level(logging.WARNING, logger="packer.store.lease.claim"):
        packer.collect_garbage(dst)
    [warning] = [r.getMessage() for r in caplog.records if "took over" in r.getMessage()]
    assert "update by host node-elsewhere pid 4242" in warning and "it expired 3 min ago" in warning
    assert lease_holders(LocalStore(dst)) == []


def test_renewal_keeps_a_long_holder_alive_and_a_holder_that_cannot_renew_learns_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PACKER_LEASE_TTL", "1")
    monkeypatch.setenv("PACKER_LEASE_RENEW", "0.2")
    store = LocalStore(tmp_path / "ds")
    lease = acquire_lease(store, "update")
    try:
        time.sleep(2.5)  # well past the time to live: only renewal keeps it
        lease.check()
        with pytest.raises(DatasetBusyError, match="in use by update"):
            acquire_lease(store, "gc")
        assert lease._keeper is not None
        os.kill(lease._keeper.pid, signal.SIGKILL)  # its keeper dies: nobody renews any more
        time.sleep(1.5)
        with pytest.raises(DatasetBusyError, match="could not renew its lease"):
            lease.check()
        with held_lease(store, "gc"):  # expired: the next writer takes it over
            with pytest.raises(DatasetBusyError, match="lost its lease"):
                lease.check()
    finally:
        lease.release()
    assert lease_holders(store) == []


def _script(body: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(body)]


@pytest.mark.slow
def test_a_holder_killed_mid_update_is_taken_over_with_a_message(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    src, dst = mixed_tree(tmp_path / "src", count=6, broken=False), tmp_path / "dst"
    packer.convert(src, dst, to="hdf5", workers=1)
    (src / "ant" / "extra.png").write_bytes(png_bytes(14, 11, 99))
    killed = subprocess.run(_script(f"""
        import os, signal, packer, packer.conversion.maintenance.updating as updating
        def die(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGKILL)
        updating.write_shards = die
        packer.update({str(src)!r}, {str(dst)!r}, workers=1)
    """), capture_output=True, text=True, timeout=120, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    [(_, left)] = lease_holders(LocalStore(dst))
    assert left.command == "update" and left.stale_reason() == f"its process {left.pid} on this host is gone"
    assert f"stale lease: update by host {left.host} pid {left.pid}" in format_info(dataset_info(dst))
    with caplog.at_level(logging.WARNING, logger="packer.store.lease.claim"):
        result = packer.update(src, dst, workers=1)
    assert result.version == 2 and result.files_added == 1
    assert any(f"update by host {left.host} pid {left.pid}" in r.getMessage() and "is gone" in r.getMessage()
               for r in caplog.records if "took over" in r.getMessage())
    assert lease_holders(LocalStore(dst)) == [] and packer.verify_dataset(dst).ok


@pytest.mark.slow
def test_a_second_convert_names_the_first_and_does_not_advise_resume(tmp_path: Path) -> None:
    src, dst = mixed_tree(tmp_path / "src", count=6, broken=False), tmp_path / "dst"
    started, go = tmp_path / "started", tmp_path / "go"
    first = subprocess.Popen(_script(f"""
        import os, time, packer, packer.conversion.execution as run
        write = run.write_shards
        def paused(*args, **kwargs):
            open({str(started)!r}, "w").close()
            while not os.path.exists({str(go)!r}):
                time.sleep(0.05)
            return write(*args, **kwargs)
        run.write_shards = paused
        packer.convert({str(src)!r}, {str(dst)!r}, to="lmdb", workers=1)
    """), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists(), first.stderr.read() if first.stderr else ""
        for flags in ({}, {"resume": True}, {"overwrite": True}):
            with pytest.raises(DatasetBusyError) as caught:
                packer.convert(src, dst, to="lmdb", workers=1, **flags)
            message = str(caught.value)
            assert f"in use by convert by host {os.uname().nodename} pid {first.pid} since " in message
            assert "resume" not in message and "interrupted" not in message
        info_of_partial = [h for _, h in lease_holders(LocalStore(dst))]
        assert [(h.command, h.pid) for h in info_of_partial] == [("convert", first.pid)]
    finally:
        go.touch()
        first.wait(120)
    assert first.returncode == 0
    assert packer.verify_dataset(dst).ok and lease_holders(LocalStore(dst)) == []


def test_array_tasks_run_together_and_merge_waits_for_them(tmp_path: Path) -> None:
    src, dst = mixed_tree(tmp_path / "src", count=8, broken=False), tmp_path / "dst"
    options = {"to": "lmdb", "shard_size": "4KB", "num_tasks": 2, "workers": 1}
    with dataset_lock(str(dst), "run task 0 into", command="convert task 0 of 2", task=0):
        done = packer.convert_task(src, dst, task_id=1, **options)  # alongside task 0
        assert done.written >= 1
        with pytest.raises(DatasetBusyError, match=r"Cannot merge .*in use by convert task 0 of 2 by host"):
            packer.merge(dst)
        with pytest.raises(DatasetBusyError, match="Cannot run task 0 into .*in use by convert task 0"):
            packer.convert_task(src, dst, task_id=0, **options)  # one id, twice at once
        with pytest.raises(DatasetBusyError, match="in use by convert task 0 of 2"):
            packer.convert(src, dst, to="lmdb", shard_size="4KB", resume=True)
    packer.convert_task(src, dst, task_id=0, **options)
    assert not packer.merge(dst).already_complete
    assert packer.verify_dataset(dst).ok


def test_info_shows_the_holder(tmp_path: Path) -> None:
    src, dst = mixed_tree(tmp_path / "src", count=4, broken=False), tmp_path / "dst"
    packer.convert(src, dst, to="hdf5", workers=1)
    assert dataset_info(dst).leases == ()
    with dataset_lock(str(dst), "update"):
        [lease] = dataset_info(dst).leases
        assert (lease["slot"], lease["command"], lease["pid"], lease["stale"]) == ("exclusive", "update",
                                                                                  os.getpid(), False)
        assert f"  in use: update by host {lease['host']} pid {os.getpid()} since " in format_info(
            dataset_info(dst))
    _plant(dst, _foreign_record(expired=True, command="gc"))
    text = format_info(dataset_info(dst))
    assert "stale lease: gc by host node-elsewhere pid 4242" in text and "it expired 3 min ago" in text


@pytest.fixture(params=["s3", "az"])
def remote_root(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on moto's S3 server, or a fresh container on Azurite, with the environment
    pointed at it (so the lease keeper's own client reaches it too)."""
    if request.param == "s3":
        request.getfixturevalue("s3_env")
        return str(request.getfixturevalue("s3_bucket"))
    url, options = request.getfixturevalue("azure_container")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", options["connection_string"])
    return str(url)


@pytest.mark.slow
def test_push_and_gc_honour_the_lease_at_the_url(tmp_path: Path, remote_root: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # A time to live short enough to outlast in a test, long enough that a loaded machine (CI
    # under coverage) still runs the busy checks below within it: 2 s failed there.
    monkeypatch.setenv("PACKER_LEASE_TTL", "4")
    monkeypatch.setenv("PACKER_LEASE_RENEW", "0.3")
    src, dst = mixed_tree(tmp_path / "src", count=4, broken=False), tmp_path / "dst"
    packer.convert(src, dst, to="lmdb", workers=1)
    url = f"{remote_root}/ds"
    push_dataset(dst, url)
    store = open_store(url)
    assert store.put_if_absent("probe", b"one") and not store.put_if_absent("probe", b"two")
    assert store.read("probe") == b"one"  # the conditional put left the first object alone
    with held_lease(store, "push") as lease:
        busy = rf"Cannot push to .*in use by push by host .* pid {os.getpid()} since"
        with pytest.raises(DatasetBusyError, match=busy):
            push_dataset(dst, url)
        with pytest.raises(DatasetBusyError, match="Cannot collect garbage in .*in use by push"):
            collect_remote_garbage(url)
        assert collect_remote_garbage(url, dry_run=True).dry_run  # reading needs no lease
        [holder] = dataset_info(url).leases
        assert (holder["command"], holder["pid"]) == ("push", os.getpid())
        time.sleep(4.5)  # past the time to live: its keeper renews it through its own S3 client
        lease.check()
    store.put(f"{LEASE_DIR}/exclusive.json", _foreign_record(expired=True, command="push"))
    assert push_dataset(dst, url).version == 1  # the expired lease is taken over
    collect_remote_garbage(url)
    assert dataset_info(url).leases == () and packer.verify_dataset(url).ok
    assert json.loads(store.read("index.json"))["format"] == "packer"
