"""The contract of a storage backend: what :class:`BackendContract` checks.

A backend is a writer and a reader of one shard file plus its size arithmetic
(:class:`~packer.format.backends.base.Backend`). The contract writes shards of awkward payloads
(none, empty ones, a megabyte, hundreds of small ones) and reads them back every way the
library does (one by one, in batches, into an arena, in a forked and a spawned process, from
racing threads), checks the size arithmetic and record ranges against the real file, then packs
whole datasets with it (:class:`~packer.testing.datasets.DatasetContract`): parity with the
source, ``verify`` catching a flipped byte, and crash and update safety.

Use it with one line::

    from packer.testing import BackendContract

    class TestMyBackend(BackendContract):
        backend = MY_BACKEND  # a packer.format.backends.Backend

A backend not registered yet is registered for each test (``register_backend``) and removed
after; conversions then start their workers by fork, which inherits the registration (register
it when your package is imported for workers started by spawn).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import random
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, ClassVar

import pytest

from packer.conversion.engines import local as local_engine
from packer.errors import ShardError
from packer.format.backends import BACKENDS, Backend, register_backend
from packer.format.backends.base import Arena, ShardReader
from packer.format.records import digest64
from packer.testing.datasets import DatasetContract
from packer.testing.plugins import registered

__all__ = ["BackendContract", "awkward_payloads"]


def awkward_payloads() -> list[bytes]:
    """Payloads that break careless writers: empty ones first and last, one byte, a megabyte
    and a bit (not a power of two), zeros, and 300 small random ones."""
    rng = random.Random(1234)
    small = [rng.randbytes(rng.randrange(0, 300)) for _ in range(300)]
    return [b"", b"a", rng.randbytes(1_000_003), b"\x00" * 17, *small, b"", b"last"]


def _child_digests(reader: ShardReader, conn: Connection) -> None:
    """In a child process: the digest of every payload, then of a batch read (or the error)."""
    try:
        digests = [digest64(reader.read(i)) for i in range(len(reader))]
        digests.append(digest64(b"".join(reader.read_many([2, 0, 2]))))
        conn.send(digests)
    except Exception as err:  # noqa: BLE001 - the parent reports whatever went wrong
        conn.send(repr(err))
    finally:
        conn.close()


def _descriptors_on(path: Path) -> int:
    """How many of this process's file descriptors are open on ``path`` (Linux)."""
    fds = os.listdir("/proc/self/fd")
    target = os.path.realpath(path)
    count = 0
    for fd in fds:
        try:
            count += os.path.realpath(f"/proc/self/fd/{fd}") == target
        except OSError:
            continue
    return count


class BackendContract(DatasetContract):
    """Every promise of a storage backend; subclass it with ``backend`` set (see the module
    docstring). ``size_tolerance`` is how far (relative) ``Backend.estimate`` may be from the
    real file size; packer's backends are exact."""

    backend: ClassVar[Backend]
    size_tolerance: ClassVar[float] = 0.0

    @pytest.fixture(autouse=True)
    def _backend_registered(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        backend = self.backend
        with registered(BACKENDS, backend.name, backend, register_backend) as added:
            if added and local_engine.START_METHOD is None:  # spawned workers would not know it
                monkeypatch.setattr(local_engine, "START_METHOD", "fork")
            yield

    # -- helpers ------------------------------------------------------------------------

    def write(self, path: Path, payloads: Sequence[bytes], capacity: int | None = None) -> Path:
        """Write ``payloads`` as one shard at ``path`` through the backend's writer."""
        if capacity is None:
            capacity = max(sum(len(p) for p in payloads), 1)
        with self.backend.writer(str(path), capacity=capacity) as writer:
            for payload in payloads:
                writer.write(payload)
        assert writer.count == len(payloads), "the writer miscounted its payloads"
        return path

    def shard_path(self, folder: Path, stem: str = "shard") -> Path:
        """Where a test shard named ``stem`` goes, with the backend's suffix."""
        return folder / f"{stem}{self.backend.suffix}"

    # -- writing and reading one shard --------------------------------------------------

    def test_payloads_read_back_every_way(self, tmp_path: Path) -> None:
        payloads = awkward_payloads()
        path = self.write(self.shard_path(tmp_path), payloads)
        assert os.listdir(tmp_path) == [path.name], "the writer left other files beside its shard"
        reader = self.backend.reader(str(path), len(payloads))
        assert len(reader) == len(payloads)
        got = [reader.read(i) for i in range(len(payloads))]
        assert all(type(g) is bytes for g in got), "read() must return bytes"
        assert got == payloads
        rng = random.Random(5)
        order = [rng.randrange(len(payloads)) for _ in range(400)] + [0, 2, 2, len(payloads) - 1]
        assert reader.read_many(order) == [payloads[i] for i in order]
        assert reader.read_many([]) == []
        arena = Arena()
        assert [bytes(v) for v in reader.read_into(order[:50], arena)] == [payloads[i] for i in order[:50]]
        assert reader.stored_count() in (None, len(payloads))
        for bad in (-1, len(payloads)):
            with pytest.raises(IndexError, match="out of range"):
                reader.read(bad)
            with pytest.raises(IndexError, match="out of range"):
                reader.read_many([0, bad])
        reader.close()
        reader.close()  # closing twice does nothing
        assert reader.read(len(payloads) - 1) == b"last"  # a closed reader reopens
        reader.close()
        assert os.listdir(tmp_path) == [path.name], "the reader left files beside the shard"

    def test_finish_puts_the_final_bytes_in_the_file(self, tmp_path: Path) -> None:
        """A conversion hashes the file once ``finish()`` returns, while ``close()`` syncs it."""
        path = self.shard_path(tmp_path)
        payloads = awkward_payloads()
        writer = self.backend.writer(str(path), capacity=sum(map(len, payloads)))
        for payload in payloads:
            writer.write(payload)
        writer.finish()
        finished = path.read_bytes()
        writer.close()
        writer.close()  # closing again does nothing
        assert path.read_bytes() == finished, "close() changed the file after finish(): a " \
            "conversion would record the checksum of an unfinished shard"
        assert self.backend.reader(str(path), len(payloads)).read_many([2, 3]) == payloads[2:4]

    def test_no_payloads_and_empty_payloads(self, tmp_path: Path) -> None:
        none = self.write(self.shard_path(tmp_path, "none"), [], capacity=1)
        reader = self.backend.reader(str(none), 0)
        assert len(reader) == 0 and reader.read_many([]) == []
        with pytest.raises(IndexError):
            reader.read(0)
        assert reader.stored_count() in (None, 0)
        empty = self.write(self.shard_path(tmp_path, "empty"), [b"", b"", b""], capacity=1)
        assert self.backend.reader(str(empty), 3).read_many([2, 0, 1]) == [b"", b"", b""]

    def test_capacity_is_only_a_hint(self, tmp_path: Path) -> None:
        rng = random.Random(9)
        payloads = [rng.randbytes(1 << 20) for _ in range(16)] + [b"tail"]
        path = self.write(self.shard_path(tmp_path), payloads, capacity=1)
        reader = self.backend.reader(str(path), len(payloads))
        assert [digest64(reader.read(i)) for i in range(len(payloads))] == [digest64(p) for p in payloads]
        reader.close()

    def test_same_payloads_give_the_same_file(self, tmp_path: Path) -> None:
        payloads = awkward_payloads()
        first = self.write(self.shard_path(tmp_path, "a"), payloads)
        second = self.write(self.shard_path(tmp_path, "b"), payloads)
        assert first.read_bytes() == second.read_bytes(), \
            "a shard must be a function of its payloads and capacity (no time stamps, no names)"

    def test_abort_leaves_nothing(self, tmp_path: Path) -> None:
        path = self.shard_path(tmp_path)
        with pytest.raises(RuntimeError, match="boom"), \
                self.backend.writer(str(path), capacity=1 << 20) as writer:
            writer.write(b"x" * 1000)
            writer.write(awkward_payloads()[2])
            raise RuntimeError("boom")
        assert os.listdir(tmp_path) == []
        writer = self.backend.writer(str(path), capacity=10)
        writer.write(b"abc")
        writer.abort()
        assert os.listdir(tmp_path) == []

    def test_size_arithmetic_and_record_ranges_match_the_file(self, tmp_path: Path) -> None:
        cases = [[], [0], [10] * 5, [1000] * 50, [300] * 300, [1 << 20, 7, 0, 65_537]]
        for number, sizes in enumerate(cases):
            rng = random.Random(number)
            payloads = [rng.randbytes(size) for size in sizes]
            path = self.write(self.shard_path(tmp_path, f"s{number}"), payloads)
            actual = path.stat().st_size
            estimate = self.backend.estimate_shard_bytes(sizes)
            if estimate is not None:
                assert abs(estimate - actual) <= self.size_tolerance * actual, \
                    f"estimate {estimate} for {len(sizes)} payloads, the file has {actual} bytes"
            if self.backend.ranges is not None:
                ranges = self.backend.ranges(str(path), len(payloads))
                assert ranges.shape == (len(payloads), 2)
                data = path.read_bytes()
                assert [data[start:start + length] for start, length in ranges.tolist()] == payloads

    def test_missing_or_foreign_file_is_a_shard_error(self, tmp_path: Path) -> None:
        gone = self.shard_path(tmp_path, "gone")
        with pytest.raises(ShardError, match="gone"):
            self.backend.reader(str(gone), 3).read(0)
        garbage = self.shard_path(tmp_path, "garbage")
        garbage.write_bytes(b"this is not a shard" * 1000)
        with pytest.raises(ShardError, match="garbage"):
            self.backend.reader(str(garbage), 3).read(0)

    # -- readers across processes and threads -------------------------------------------

    def test_reader_pickles_as_its_path(self, tmp_path: Path) -> None:
        payloads = awkward_payloads()
        path = self.write(self.shard_path(tmp_path), payloads)
        reader = self.backend.reader(str(path), len(payloads))
        assert pickle.loads(pickle.dumps(reader)).read(2) == payloads[2]
        assert reader.read(3) == payloads[3]
        blob = pickle.dumps(reader)  # an open reader pickles as its path only
        assert len(blob) < 1024, f"a pickled reader takes {len(blob)} bytes: pickle the path only"
        again = pickle.loads(blob)
        assert [again.read(i) for i in range(len(payloads))] == payloads
        assert reader.read_many([4, 5]) == payloads[4:6]  # the original keeps working
        reader.close()
        again.close()

    @pytest.mark.timeout(120)
    @pytest.mark.parametrize("start_method", ["fork", "spawn"])
    def test_reader_used_by_the_parent_works_in_a_child(self, tmp_path: Path, start_method: str) -> None:
        payloads = awkward_payloads()
        path = self.write(self.shard_path(tmp_path), payloads)
        reader = self.backend.reader(str(path), len(payloads))
        assert reader.read(2) == payloads[2]  # the parent holds an open handle now
        context: Any = multiprocessing.get_context(start_method)
        parent_end, child_end = context.Pipe(duplex=False)
        child = context.Process(target=_child_digests, args=(reader, child_end))
        child.start()
        child_end.close()
        got = parent_end.recv()
        child.join(60)
        assert child.exitcode == 0, got
        assert got == [digest64(p) for p in payloads] + [digest64(payloads[2] + payloads[0] + payloads[2])]
        assert reader.read(len(payloads) - 1) == b"last"  # and the parent still reads
        reader.close()

    @pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
    def test_threads_racing_to_the_first_read_open_it_once(self, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
        payloads = awkward_payloads()
        path = self.write(self.shard_path(tmp_path), payloads)
        reader = self.backend.reader(str(path), len(payloads))
        real_open = self.backend.reader._open
        opened: list[int] = []
        second_caller = threading.Event()

        def observed_open(self: ShardReader) -> None:
            opened.append(threading.get_ident())
            if len(opened) == 1:
                second_caller.wait(0.5)  # a window in which a racing thread could open it too
            else:
                second_caller.set()
            real_open(self)

        monkeypatch.setattr(self.backend.reader, "_open", observed_open)
        with ThreadPoolExecutor(2) as pool:
            assert list(pool.map(reader.read, [2, 3])) == payloads[2:4]
        assert len(opened) == 1
        assert _descriptors_on(path) >= 1
        reader.close()
        assert _descriptors_on(path) == 0, "close() left descriptors open on the shard"
