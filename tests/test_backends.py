"""Backends beyond their contract (tests/test_contracts.py, :mod:`packer.testing.backends`): any
payloads round-trip (Hypothesis, every registered backend), each built-in's on-disk layout as
plain LMDB and h5py read it, and the registry."""

from __future__ import annotations

import errno
import os
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path

import h5py
import lmdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packer.errors import OutputError, ShardError, ShardWriteError, UnknownNameError
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


def test_hdf5_copy_errors_are_write_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(*args: int) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "copy_file_range", failing)
    with pytest.raises(ShardWriteError, match="Input/output error") as caught:
        write_shard(get_backend("hdf5"), tmp_path / "s.h5", [b"abc"])
    assert caught.value.errno == errno.EIO and isinstance(caught.value, OutputError)
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
