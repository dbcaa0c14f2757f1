"""Reads after the page cache was dropped: the path a cold node or a first epoch takes.

No timing here (benchmarks live in scripts/bench_read.py); this proves the cold path returns
exactly the right bytes through a multi-worker DataLoader, and pins the reader settings that
keep it fast: LMDB with the kernel's readahead on (``readahead=False`` turned every 4 KB page of
a value into its own read, 0.2x of a folder when cold), HDF5 with one ``pread`` per sample.
"""

from __future__ import annotations

import os
from pathlib import Path

import lmdb
import pytest
from imagetools import jpeg_bytes, write_tree
from torch.utils.data import DataLoader

import packer
from packer.format.backends import Backend
from packer.format.backends import lmdb_reader as lmdb_backend


def _drop_from_page_cache(root: Path) -> int:
    dropped = 0
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)  # dirty pages cannot be dropped
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            dropped += 1
    return dropped


def _as_list(batch: list[tuple[bytes, int]]) -> list[tuple[bytes, int]]:
    return batch


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_cold_shuffled_reads_return_the_source_bytes(tmp_path: Path, backend: Backend) -> None:
    spec = {f"{('x', 'y', 'z')[i % 3]}/{i:03d}.jpg": jpeg_bytes(48 + i % 17, 40 + i % 11, i)
            for i in range(90)}
    src = write_tree(tmp_path / "src", spec)
    packer.convert(src, tmp_path / "dst", to=backend.name, shard_size="20kB")
    ds = packer.open_dataset(tmp_path / "dst", decode=False)
    expected = {(spec[path], target) for path, target in ds.samples}
    for _ in range(2):  # a cold epoch, and one more after the cache is dropped again
        assert _drop_from_page_cache(tmp_path / "dst") > 3
        loader = DataLoader(ds, batch_size=8, shuffle=True, num_workers=2, collate_fn=_as_list)
        got = [item for batch in loader for item in batch]
        assert len(got) == 90 and set(got) == expected


def test_lmdb_readers_keep_kernel_readahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[dict[str, object]] = []
    real_open = lmdb.open

    def spy(path: str, **kwargs: object) -> lmdb.Environment:
        opened.append(kwargs)
        return real_open(path, **kwargs)

    src = write_tree(tmp_path / "src", {"a/1.jpg": jpeg_bytes(8, 8, 1)})
    packer.convert(src, tmp_path / "dst", to="lmdb")
    monkeypatch.setattr(lmdb_backend.lmdb, "open", spy)
    packer.open_dataset(tmp_path / "dst", decode=False)[0]
    assert opened and opened[-1]["readahead"] is True and opened[-1]["readonly"] is True
    assert opened[-1]["lock"] is False


def test_lmdb_values_are_copied_with_one_pread_or_from_the_map(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """One ``pread`` of each value's exact range (fewer round trips cold or on shared storage);
    where the map's base is unknown, the same bytes from the map."""
    from packer.format.backends import lmdb_reader as lmdb_backend
    from packer.format.backends.lmdb import BACKEND as LMDB_BACKEND

    payloads = [bytes([i]) * (100 + 5000 * i) for i in range(6)]  # inline and overflow values
    path = str(tmp_path / "shard.lmdb")
    with LMDB_BACKEND.writer(path, capacity=1 << 20) as writer:
        for payload in payloads:
            writer.write(payload)
    calls: list[tuple[int, int]] = []
    real_pread = os.pread

    def counting(fd: int, size: int, offset: int) -> bytes:
        calls.append((size, offset))
        return real_pread(fd, size, offset)

    monkeypatch.setattr(lmdb_backend.os, "pread", counting)
    reader = LMDB_BACKEND.reader(path, len(payloads))
    assert [reader.read(i) for i in (5, 0, 3)] == [payloads[5], payloads[0], payloads[3]]
    assert [size for size, _ in calls] == [len(payloads[i]) for i in (5, 0, 3)]
    reader.close()
    calls.clear()
    monkeypatch.setattr(lmdb_backend, "_map_base", lambda path: None)
    reader = LMDB_BACKEND.reader(path, len(payloads))
    assert [reader.read(i) for i in range(6)] == payloads and calls == []
    reader.close()
