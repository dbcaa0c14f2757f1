"""The records array is built by the tasks that write the shards, never by reading them back.

Each task knows its payloads' digests (for ``original``, the sources' own) and asks the backend
where they landed; its receipt carries the rows, so finishing a conversion (or ``packer merge``)
only concatenates. The array must be exactly the one read back from the files, however the
shards were written (whole, in segments, by array tasks), and a receipt without rows (an older
packer's, or damaged) falls back to reading its shard. Also here: what makes that fast without
changing a byte: the shard is hashed while it is synced (so :meth:`ShardWriter.finish` must
leave the file's final bytes), receipts are written without deep copies, and a source file is
read with one ``open``.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import socket
import threading
from pathlib import Path

import numpy as np
import pytest
from imagetools import dataset_snapshot, mixed_tree

import packer
from packer import digests
from packer.conversion.receipts import RECEIPTS_DIR, ShardResult, load_receipt
from packer.format import records as records_module
from packer.format.backends import Backend
from packer.format.manifest import Manifest, ShardEntry, SkippedFile
from packer.format.records import records_from_bytes, records_of_shards, records_to_bytes
from packer.format.sample_index import SampleIndex
from packer.source.sourcefile import UnpackableFile, read_source
from packer.store.durable import sha256_file

SHARD_SIZE = "1500"  # bytes: mixed_tree becomes about a dozen shards


def _records_read_back(dst: Path, backend: Backend) -> np.ndarray:
    manifest = Manifest.load(str(dst))
    shards = [(str(dst / shard.path), shard.num_samples) for shard in manifest.shards]
    return records_of_shards(backend, shards, digest=manifest.digest_algorithm)


def _records_kept(dst: Path) -> np.ndarray:
    return np.asarray(SampleIndex.of(str(dst), Manifest.load(str(dst))).records)


@pytest.mark.parametrize(("codec", "check", "shard_size", "workers"), [
    ("original", "none", SHARD_SIZE, 2),  # whole shards, digests from the sources
    ("original", "full", "1GB", 2),  # one shard: segments packed in parallel, written by the coordinator
    ("jpeg", "header", SHARD_SIZE, 1),  # re-encoded payloads: their own digests
    ("pixels", "none", "1GB", 2),
])
def test_kept_records_are_those_read_back_from_the_shards(tmp_path: Path, backend: Backend, codec: str,
                                                          check: str, shard_size: str, workers: int) -> None:
    src, dst = mixed_tree(tmp_path / "src"), tmp_path / "dst"
    packer.convert(src, dst, to=backend.name, codec=codec, check=check, shard_size=shard_size,
                   workers=workers)
    kept = _records_kept(dst)
    assert kept.dtype == np.int64 and kept.shape == (Manifest.load(str(dst)).num_samples, 3)
    np.testing.assert_array_equal(kept, _records_read_back(dst, backend))


def test_finishing_a_conversion_reads_no_shard_back(tmp_path: Path, backend: Backend,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> np.ndarray:
        raise AssertionError("a shard was read back to build the records array")

    monkeypatch.setattr(records_module, "shard_records", refuse)
    src, dst = mixed_tree(tmp_path / "src"), tmp_path / "dst"
    packer.convert(src, dst, to=backend.name, shard_size=SHARD_SIZE, workers=1)
    assert len(_records_kept(dst)) == Manifest.load(str(dst)).num_samples


def test_an_update_takes_the_rows_of_reused_shards_from_the_version_it_updates(
        tmp_path: Path, backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    src, dst, fresh = mixed_tree(tmp_path / "src"), tmp_path / "dst", tmp_path / "fresh"
    packer.convert(src, dst, to=backend.name, shard_size=SHARD_SIZE, workers=1)
    (src / "ant" / "000.png").unlink()
    real = records_module.shard_records
    monkeypatch.setattr(records_module, "shard_records", lambda *args: pytest.fail("a shard was read back"))
    result = packer.update(src, dst, workers=1)
    assert result.shards_reused >= 3 and result.shards_written >= 1
    monkeypatch.setattr(records_module, "shard_records", real)
    packer.convert(src, fresh, to=backend.name, shard_size=SHARD_SIZE, workers=1)
    np.testing.assert_array_equal(_records_kept(dst), _records_read_back(dst, backend))
    np.testing.assert_array_equal(_records_kept(dst), _records_kept(fresh))


def _receipts(dst: Path) -> list[Path]:
    return sorted((dst / RECEIPTS_DIR).glob("*.json"))


def test_receipts_without_records_are_read_back_by_merge(tmp_path: Path, backend: Backend) -> None:
    src, local, array = mixed_tree(tmp_path / "src"), tmp_path / "local", tmp_path / "array"
    packer.convert(src, local, to=backend.name, shard_size=SHARD_SIZE, workers=1)
    packer.convert_task(src, array, task_id=0, num_tasks=1, to=backend.name, shard_size=SHARD_SIZE, workers=1)
    receipts = _receipts(array)
    assert len(receipts) > 3
    for number, path in enumerate(receipts):
        data = json.loads(path.read_text())
        assert isinstance(data["records"], str)
        if number % 3 == 0:
            del data["records"]  # a receipt written by an older packer
        elif number % 3 == 1:  # damaged: part of a row, or not base64 at all
            data["records"] = base64.b64encode(b"\0" * 20).decode() if number % 2 else "#not base64#"
        path.write_text(json.dumps(data))
    packer.merge(array)
    assert dataset_snapshot(array) == dataset_snapshot(local)


def test_a_receipt_round_trips_with_its_records(tmp_path: Path) -> None:
    rows = np.array([[4096, 10, -5], [8192, 3, 2**62]], dtype=np.int64)
    result = ShardResult(
        entry=ShardEntry("shard-ab.lmdb", -1, 2, 12288, "ab" * 32, "inputs", "contents"),
        relpaths=("a/1.jpg", "a/caf\udce9.jpg"), targets=(0, 0),
        skipped=(SkippedFile("a/2.jpg", "empty_file", "the file is empty (0 bytes)", 0, 7),),
        bytes_in=13, fingerprint="f" * 64, metadata=(), sources=((10, 1, -5), (3, 2, 2**62)),
        records=records_to_bytes(rows))
    (tmp_path / RECEIPTS_DIR).mkdir()
    (tmp_path / RECEIPTS_DIR / ("f" * 64 + ".json")).write_bytes(result.to_json().encode("utf-8",
                                                                                         "surrogateescape"))
    (tmp_path / "shard-ab.lmdb").write_bytes(b"\0" * 12288)
    loaded = load_receipt(str(tmp_path), "f" * 64)
    assert loaded == result
    got = loaded.records_array() if loaded is not None else None
    assert got is not None
    np.testing.assert_array_equal(got, rows)
    assert records_from_bytes(records_to_bytes(rows), 3) is None  # rows of another count
    assert ShardResult(result.entry, (), (), (), 0, "x").records_array() is None  # unknown


def test_the_file_is_final_once_the_writer_is_finished(tmp_path: Path, backend: Backend) -> None:
    """What lets a task hash the shard while it is synced: :meth:`ShardWriter.close` after
    :meth:`ShardWriter.finish` changes no byte (and closing twice does nothing)."""
    path = str(tmp_path / f"shard{backend.suffix}")
    payloads = [bytes([i]) * (100 + 5000 * i) for i in range(7)]
    writer = backend.writer(path, capacity=sum(map(len, payloads)))
    for payload in payloads:
        writer.write(payload)
    writer.finish()
    finished = sha256_file(path)
    writer.close()
    writer.close()
    assert sha256_file(path) == finished
    reader = backend.reader(path, len(payloads))
    try:
        assert reader.read_many(range(len(payloads))) == payloads
    finally:
        reader.close()


@pytest.mark.parametrize("size", [0, 1, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 17])
def test_sha256_file_at_block_boundaries(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(str(tmp_path / "f")) == hashlib.sha256(data).hexdigest()
    assert digests._CHUNK == 1 << 20  # the sizes above straddle it
    if importlib.util.find_spec("blake3"):
        import blake3

        assert digests.get_digest("blake3").file(str(tmp_path / "f")) == blake3.blake3(data).hexdigest()


def test_read_source_opens_once_and_reads_the_file_whole(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(300_000)
    (tmp_path / "a.jpg").write_bytes(data)
    opened: list[str] = []
    real_open = os.open

    def counting_open(path: str, *args: int) -> int:
        opened.append(path)
        return real_open(path, *args)

    monkeypatch.setattr(os, "open", counting_open)
    assert read_source(str(tmp_path / "a.jpg")) == data
    assert opened == [str(tmp_path / "a.jpg")]


def test_read_source_reads_to_the_end_whatever_the_size_said(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(50_000)
    (tmp_path / "a.jpg").write_bytes(data)
    real_read, real_fstat = os.read, os.fstat
    monkeypatch.setattr(os, "read", lambda fd, n: real_read(fd, min(n, 777)))  # short reads
    assert read_source(str(tmp_path / "a.jpg")) == data

    class Smaller:  # the file grew after it was looked at
        def __init__(self, st: os.stat_result) -> None:
            self.st_mode, self.st_size = st.st_mode, st.st_size // 3

    monkeypatch.setattr(os, "read", real_read)
    monkeypatch.setattr(os, "fstat", lambda fd: Smaller(real_fstat(fd)))
    assert read_source(str(tmp_path / "a.jpg")) == data


def test_read_source_says_why_a_special_file_cannot_be_read(tmp_path: Path) -> None:
    (tmp_path / "dir.jpg").mkdir()
    os.mkfifo(tmp_path / "fifo.jpg")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "sock.jpg"))
        done: list[str] = []

        def read_all() -> None:  # a FIFO must not block waiting for a writer
            for name in ("dir.jpg", "fifo.jpg", "sock.jpg"):
                try:
                    read_source(str(tmp_path / name))
                except UnpackableFile as err:
                    done.append(err.reason)

        thread = threading.Thread(target=read_all, daemon=True)
        thread.start()
        thread.join(timeout=10)
        assert done == ["not_a_regular_file"] * 3
    finally:
        sock.close()
    (tmp_path / "empty.jpg").write_bytes(b"")
    with pytest.raises(UnpackableFile) as empty:
        read_source(str(tmp_path / "empty.jpg"))
    assert empty.value.reason == "empty_file"
    os.symlink(tmp_path / "gone.jpg", tmp_path / "dangling.jpg")
    os.symlink(tmp_path / "loop.jpg", tmp_path / "loop.jpg")
    for name in ("dangling.jpg", "loop.jpg"):
        with pytest.raises(UnpackableFile) as broken:
            read_source(str(tmp_path / name))
        assert broken.value.reason == "broken_symlink"
    with pytest.raises(FileNotFoundError):
        read_source(str(tmp_path / "never.jpg"))
