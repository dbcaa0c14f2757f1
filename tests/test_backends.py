"""The shard backend contract, run for every registered backend (the ``backend`` fixture)."""

from __future__ import annotations

import errno
import multiprocessing
import os
import pickle
import random
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import lmdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from imagetools import sha

from packer.errors import ShardError, UnknownNameError
from packer.format.backends import Backend, backend_names, get_backend, register_backend
from packer.format.backends.base import ShardReader


def make_payloads() -> list[bytes]:
    rng = random.Random(1234)
    small = [rng.randbytes(rng.randrange(0, 300)) for _ in range(300)]
    return [b"", b"a", rng.randbytes(1_000_003), b"\x00" * 17, *small, b"", b"last"]


PAYLOADS = make_payloads()


def write_shard(backend: Backend, path: Path, payloads: Sequence[bytes],
                capacity: int | None = None) -> None:
    total = sum(len(p) for p in payloads)
    with backend.writer(str(path), capacity=total if capacity is None else capacity) as writer:
        for payload in payloads:
            writer.write(payload)
        assert writer.count <= len(payloads)
    assert writer.count == len(payloads)


@pytest.fixture
def shard(tmp_path: Path, backend: Backend) -> Path:
    path = tmp_path / f"shard-00000{backend.suffix}"
    write_shard(backend, path, PAYLOADS)
    return path


def test_round_trip(shard: Path, backend: Backend) -> None:
    reader = backend.reader(str(shard), len(PAYLOADS))
    assert len(reader) == len(PAYLOADS)
    got = [reader.read(i) for i in range(len(PAYLOADS))]
    assert all(type(g) is bytes for g in got)
    assert got == PAYLOADS
    # only the shard itself is on disk: no lock file, no side file
    assert os.listdir(shard.parent) == [shard.name]


@settings(deadline=None, max_examples=25,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(st.binary(max_size=2000), max_size=40), data=st.data())
def test_any_payloads_round_trip(backend: Backend, payloads: list[bytes],
                                 data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as root:
        path = Path(root, f"s{backend.suffix}")
        capacity = data.draw(st.integers(1, sum(map(len, payloads)) + 1), label="capacity")
        write_shard(backend, path, payloads, capacity=capacity)
        reader = backend.reader(str(path), len(payloads))
        assert [reader.read(i) for i in range(len(payloads))] == payloads
        if payloads:
            order = data.draw(st.lists(st.integers(0, len(payloads) - 1)), label="order")
            assert reader.read_many(order) == [payloads[i] for i in order]
        reader.close()


def test_read_many_equals_single_reads(shard: Path, backend: Backend) -> None:
    reader = backend.reader(str(shard), len(PAYLOADS))
    rng = random.Random(5)
    indices = [rng.randrange(len(PAYLOADS)) for _ in range(500)] + [0, 2, 2, len(PAYLOADS) - 1]
    assert reader.read_many(indices) == [PAYLOADS[i] for i in indices]
    assert reader.read_many(indices) == [reader.read(i) for i in indices]
    assert reader.read_many([]) == []


@pytest.mark.parametrize("bad", [-1, len(PAYLOADS), len(PAYLOADS) + 10])
def test_out_of_range(shard: Path, backend: Backend, bad: int) -> None:
    reader = backend.reader(str(shard), len(PAYLOADS))
    with pytest.raises(IndexError, match="out of range"):
        reader.read(bad)
    with pytest.raises(IndexError, match="out of range"):
        reader.read_many([0, bad])


def test_close_then_read_again(shard: Path, backend: Backend) -> None:
    reader = backend.reader(str(shard), len(PAYLOADS))
    assert reader.read(1) == b"a"
    reader.close()
    reader.close()  # idempotent
    assert reader.read(2) == PAYLOADS[2]


def test_empty_shard(tmp_path: Path, backend: Backend) -> None:
    path = tmp_path / f"empty{backend.suffix}"
    write_shard(backend, path, [], capacity=1)
    reader = backend.reader(str(path), 0)
    assert len(reader) == 0
    assert reader.read_many([]) == []
    with pytest.raises(IndexError):
        reader.read(0)


def test_only_empty_payloads(tmp_path: Path, backend: Backend) -> None:
    path = tmp_path / f"zeros{backend.suffix}"
    write_shard(backend, path, [b"", b"", b""], capacity=1)
    assert backend.reader(str(path), 3).read_many([2, 0, 1]) == [b"", b"", b""]


def test_abort_leaves_no_file(tmp_path: Path, backend: Backend) -> None:
    path = tmp_path / f"aborted{backend.suffix}"
    with pytest.raises(RuntimeError, match="boom"), \
            backend.writer(str(path), capacity=1 << 20) as writer:
        writer.write(b"x" * 1000)
        writer.write(PAYLOADS[2])
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    writer = backend.writer(str(path), capacity=10)
    writer.write(b"abc")
    writer.abort()
    assert os.listdir(tmp_path) == []


def test_reader_pickles_before_and_after_first_read(shard: Path, backend: Backend) -> None:
    reader = backend.reader(str(shard), len(PAYLOADS))
    fresh = pickle.loads(pickle.dumps(reader))
    assert len(pickle.dumps(reader)) < 1024
    assert fresh.read(2) == PAYLOADS[2]
    assert reader.read(3) == PAYLOADS[3]
    blob = pickle.dumps(reader)  # an open reader pickles as its path only
    assert len(blob) < 1024
    again = pickle.loads(blob)
    assert [again.read(i) for i in range(len(PAYLOADS))] == PAYLOADS
    assert reader.read_many([4, 5]) == PAYLOADS[4:6]  # the original keeps working


def _child_reads(reader: ShardReader, conn: multiprocessing.connection.Connection) -> None:
    try:
        conn.send([sha(reader.read(i)) for i in range(len(reader))]
                  + [sha(b"".join(reader.read_many([2, 0, 2])))])
    except Exception as err:  # noqa: BLE001 - the parent reports whatever went wrong
        conn.send(repr(err))
    finally:
        conn.close()


@pytest.mark.timeout(60)
def test_reader_works_in_a_forked_child_after_the_parent_read(shard: Path, backend: Backend) -> None:
    reader = backend.reader(str(shard), len(PAYLOADS))
    assert reader.read(2) == PAYLOADS[2]  # the parent holds an open handle now
    ctx = multiprocessing.get_context("fork")
    parent_end, child_end = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child_reads, args=(reader, child_end))
    child.start()
    child_end.close()
    result = parent_end.recv()
    child.join(30)
    assert child.exitcode == 0
    assert result == [sha(p) for p in PAYLOADS] + [sha(PAYLOADS[2] + PAYLOADS[0] + PAYLOADS[2])]
    assert reader.read(len(PAYLOADS) - 1) == b"last"  # and the parent still reads


def _shard_fds(path: Path) -> int:
    fds = os.listdir("/proc/self/fd")
    return sum(1 for fd in fds if os.path.realpath(f"/proc/self/fd/{fd}") == str(path))


def test_threads_racing_to_the_first_read_open_the_file_once(
        shard: Path, backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    reader = backend.reader(str(shard), len(PAYLOADS))
    real_open = backend.reader._open
    opened: list[int] = []
    second_caller = threading.Event()

    def observed_open(self: ShardReader) -> None:
        opened.append(threading.get_ident())
        if len(opened) == 1:
            second_caller.wait(0.5)  # a window in which a racing thread could open it too
        else:
            second_caller.set()
        real_open(self)

    monkeypatch.setattr(backend.reader, "_open", observed_open)
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(reader.read, [2, 3])) == PAYLOADS[2:4]
    assert len(opened) == 1
    # LMDB: its environment, plus the descriptor its reader preads values with.
    assert _shard_fds(shard) == (2 if backend.name == "lmdb" else 1)
    reader.close()
    assert _shard_fds(shard) == 0  # nothing leaked


def test_capacity_far_too_small_still_gives_a_correct_shard(tmp_path: Path,
                                                            backend: Backend) -> None:
    rng = random.Random(9)
    payloads = [rng.randbytes(1 << 20) for _ in range(20)] + [b"tail"]  # 20 MiB > any slack
    path = tmp_path / f"grown{backend.suffix}"
    write_shard(backend, path, payloads, capacity=1)
    reader = backend.reader(str(path), len(payloads))
    assert [sha(reader.read(i)) for i in range(len(payloads))] == [sha(p) for p in payloads]


def test_lmdb_map_grows_when_capacity_is_too_small(tmp_path: Path) -> None:
    backend = get_backend("lmdb")
    payloads = [bytes([i]) * (1 << 20) for i in range(24)]
    path = tmp_path / "grown.lmdb"
    writer = backend.writer(str(path), capacity=1)
    initial = writer._map_size  # type: ignore[attr-defined]
    with writer:
        for payload in payloads:
            writer.write(payload)
    assert os.path.getsize(path) > initial  # more data than the first map could hold
    env = lmdb.open(str(path), subdir=False, readonly=True, lock=False)
    try:
        assert env.info()["map_size"] > initial
        assert env.stat()["entries"] == len(payloads)
    finally:
        env.close()
    assert backend.reader(str(path), 24).read(23) == payloads[23]


def test_same_payloads_give_byte_identical_files(tmp_path: Path, backend: Backend) -> None:
    first, second = tmp_path / f"a{backend.suffix}", tmp_path / f"b{backend.suffix}"
    write_shard(backend, first, PAYLOADS)
    write_shard(backend, second, PAYLOADS)
    assert first.read_bytes() == second.read_bytes()


def test_missing_file_is_a_shard_error(tmp_path: Path, backend: Backend) -> None:
    reader = backend.reader(str(tmp_path / f"gone{backend.suffix}"), 3)
    with pytest.raises(ShardError, match="gone"):
        reader.read(0)


def test_garbage_file_is_a_shard_error(tmp_path: Path, backend: Backend) -> None:
    path = tmp_path / f"garbage{backend.suffix}"
    path.write_bytes(b"this is not a shard" * 1000)
    with pytest.raises(ShardError, match="garbage"):
        backend.reader(str(path), 3).read(0)


# ----------------------------------------------------------------------------- on-disk layout


def test_lmdb_layout_is_readable_with_plain_lmdb(tmp_path: Path) -> None:
    payloads = [b"zero", b"", b"two" * 1000]
    path = tmp_path / "s.lmdb"
    write_shard(get_backend("lmdb"), path, payloads)
    env = lmdb.open(str(path), subdir=False, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            items = list(txn.cursor())
    finally:
        env.close()
    assert items == [(i.to_bytes(8, "big"), p) for i, p in enumerate(payloads)]
    assert os.listdir(tmp_path) == ["s.lmdb"]


def test_hdf5_layout_is_readable_with_plain_h5py(tmp_path: Path) -> None:
    payloads = [b"zero", b"", b"two" * 1000]
    path = tmp_path / "s.h5"
    write_shard(get_backend("hdf5"), path, payloads)
    with h5py.File(path, "r") as handle:
        assert handle.attrs["packer_format_version"] == 1
        blob, offsets = handle["blob"], handle["offsets"]
        assert blob.dtype == np.uint8 and blob.chunks is None and blob.compression is None
        assert offsets.dtype == np.int64
        assert list(offsets[:]) == [0, 4, 4, 3004]
        data = blob[:].tobytes()
    assert [data[a:b] for a, b in zip([0, 4, 4], [4, 4, 3004], strict=True)] == payloads


def test_hdf5_reader_handles_a_rechunked_compressed_blob(tmp_path: Path) -> None:
    payloads = [b"alpha", b"", b"gamma" * 300]
    offsets = np.cumsum([0] + [len(p) for p in payloads]).astype(np.int64)
    path = tmp_path / "rechunked.h5"
    with h5py.File(path, "w") as handle:
        handle.create_dataset("offsets", data=offsets)
        handle.create_dataset("blob", data=np.frombuffer(b"".join(payloads), dtype=np.uint8),
                              chunks=(64,), compression="gzip")
    reader = get_backend("hdf5").reader(str(path), len(payloads))
    assert reader.read_many([2, 0, 1]) == [payloads[2], payloads[0], payloads[1]]
    reader.close()


@pytest.mark.parametrize("works_first", [0, 1])
def test_hdf5_writer_without_copy_file_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             works_first: int) -> None:
    """Filesystems and sandboxes that refuse copy_file_range still get a byte-identical shard."""
    backend = get_backend("hdf5")
    reference = tmp_path / "reference.h5"
    write_shard(backend, reference, PAYLOADS)
    real = os.copy_file_range
    calls = {"n": 0}

    def refusing(src: int, dst: int, count: int, offset_src: int, offset_dst: int) -> int:
        calls["n"] += 1
        if calls["n"] <= works_first:  # copy a part first, then refuse
            return real(src, dst, min(count, 1000), offset_src, offset_dst)
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(os, "copy_file_range", refusing)
    path = tmp_path / "fallback.h5"
    write_shard(backend, path, PAYLOADS)
    assert calls["n"] == works_first + 1
    assert path.read_bytes() == reference.read_bytes()


def test_hdf5_copy_errors_are_shard_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(*args: int) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "copy_file_range", failing)
    with pytest.raises(ShardError, match="Input/output error"):
        write_shard(get_backend("hdf5"), tmp_path / "s.h5", [b"abc"])
    assert not (tmp_path / "s.h5.payloads").exists()


def test_hdf5_sample_count_mismatch_is_a_shard_error(tmp_path: Path) -> None:
    path = tmp_path / "s.h5"
    write_shard(get_backend("hdf5"), path, [b"a", b"b"])
    with pytest.raises(ShardError, match="manifest says 3"):
        get_backend("hdf5").reader(str(path), 3).read(0)


# ----------------------------------------------------------------------------- registry


def test_registry_names() -> None:
    assert backend_names() == ("hdf5", "lmdb")
    for name in backend_names():
        backend = get_backend(name)
        assert backend.name == name
        assert backend.suffix.startswith(".")
        assert issubclass(backend.reader, ShardReader)


def test_unknown_backend_lists_the_choices() -> None:
    with pytest.raises(UnknownNameError, match="'zarr'.*hdf5, lmdb") as info:
        get_backend("zarr")
    assert isinstance(info.value, LookupError)


def test_registering_a_taken_name_is_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_backend(get_backend("lmdb"))
