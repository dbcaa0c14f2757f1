"""The one flock helper: exclusive and shared locks, waiting or not, and file systems without flock.

``flock`` belongs to an open file description, so two opens in one process contend as two
processes would: these tests need no second process.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from packer.store.filelock import flocked, flocked_where_supported


def _free(path: Path, *, shared: bool = False) -> bool:
    """Whether another open of ``path`` can take the lock now (and releases it at once)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_flocked_creates_the_file_holds_it_exclusively_and_yields_a_usable_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "usage"
    with flocked(str(path)) as fd:
        assert path.exists() and not _free(path) and not _free(path, shared=True)
        os.pwrite(fd, b"12 3", 0)
        assert os.pread(fd, 4, 0) == b"12 3"
    assert _free(path) and path.read_bytes() == b"12 3"


def test_shared_flocks_coexist_and_exclude_an_exclusive_one(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    with flocked(str(path), shared=True), flocked(str(path), shared=True):
        assert _free(path, shared=True) and not _free(path)
    assert _free(path)


def test_flocked_waits_for_the_holder(tmp_path: Path) -> None:
    path = str(tmp_path / "lock")
    order = []
    with flocked(path):
        def second() -> None:
            with flocked(path):
                order.append("second")
        waiter = threading.Thread(target=second)
        waiter.start()
        time.sleep(0.2)
        order.append("first")
    waiter.join(10)
    assert order == ["first", "second"]


def test_where_supported_calls_busy_until_the_lock_is_free_and_busy_may_give_up(tmp_path: Path) -> None:
    calls = []
    folder = tmp_path
    holder = os.open(folder, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)

    def busy() -> None:
        calls.append(1)
        if len(calls) == 3:
            fcntl.flock(holder, fcntl.LOCK_UN)  # the other holder lets go

    with flocked_where_supported(str(folder), busy=busy):
        assert len(calls) == 3 and not _free(folder)
    assert _free(folder)

    fcntl.flock(holder, fcntl.LOCK_SH)
    with flocked_where_supported(str(folder), shared=True, busy=busy):  # shared with shared: no wait
        assert len(calls) == 3

    def give_up() -> None:
        raise TimeoutError("held")

    with pytest.raises(TimeoutError), flocked_where_supported(str(folder), busy=give_up):
        pytest.fail("the block ran without the lock")
    os.close(holder)


def test_where_supported_runs_unlocked_where_the_file_system_cannot_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran = []
    with flocked_where_supported(str(tmp_path / "missing"), busy=lambda: None):
        ran.append("unopenable")

    def unsupported(fd: int, mode: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", unsupported)
    with flocked_where_supported(str(tmp_path), busy=lambda: None):
        ran.append("no flock")
    assert ran == ["unopenable", "no flock"]

    def failing(fd: int, mode: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(fcntl, "flock", failing)
    with pytest.raises(OSError, match="I/O error"), flocked_where_supported(str(tmp_path), busy=lambda: None):
        pytest.fail("the block ran after flock failed")
