"""A tar of many class tars (ImageNet's training tar) has its member tars indexed by a pool of
processes: the listing is the very one a single process makes (members, offsets, notes, errors,
order), and converting it gives the same dataset as the tree it holds."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from imagetools import image_bytes, write_tree

import packer
from packer.source.archive import tarindex
from packer.source.archive.tarindex import PARALLEL_INNER, index_tar

CLASSES = PARALLEL_INNER + 6


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _class_tar(images: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in images.items():
            _add(tar, name, data)
    return out.getvalue()


def _tree(c: int) -> dict[str, bytes]:
    return {f"n{c:03d}_{i}.png": image_bytes(".png", 8 + i, 8, c * 7 + i) for i in range(1 + c % 3)}


def _archive(path: Path, *, damaged: bool = False) -> Path:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for c in range(CLASSES):
            _add(tar, f"n{c:03d}.tar", _class_tar(_tree(c)))
        if damaged:
            _add(tar, "zz_not_a_tar.tar", b"this is no tar archive" * 40)
            broken = bytearray(_class_tar(_tree(1)))
            broken[600:1100] = b"\x07" * 500  # the second member's header and data overwritten
            _add(tar, "zz_broken.tar", bytes(broken))
    return path


@pytest.mark.parametrize("damaged", [False, True])
def test_a_pool_lists_the_member_tars_as_one_process_does(tmp_path: Path, damaged: bool) -> None:
    archive = _archive(tmp_path / "train.tar", damaged=damaged)
    pools = []
    pooled_by = tarindex._index_pending

    def counted(*args: object) -> object:
        pools.append(args)
        return pooled_by(*args)  # type: ignore[arg-type]

    alone, _ = index_tar(str(archive), workers=1)
    tarindex._index_pending = counted  # type: ignore[assignment]
    try:
        pooled, _ = index_tar(str(archive), workers=2)
    finally:
        tarindex._index_pending = pooled_by
    assert len(pools) == 1  # the pool did index them
    assert len(pooled.inner) == CLASSES + 2 * damaged
    assert pooled == alone
    assert list(pooled.inner) == list(alone.inner)  # archive order
    if damaged:
        assert pooled.inner["zz_not_a_tar.tar"].error is not None


def test_a_few_member_tars_are_indexed_in_this_process(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "small.tar"
    with tarfile.open(path, "w") as tar:
        for c in range(3):
            _add(tar, f"n{c}.tar", _class_tar(_tree(c)))

    def no_pool(*args: object) -> None:
        raise AssertionError("a pool was started for three member tars")

    monkeypatch.setattr(tarindex, "_index_pending", no_pool)
    listing, _ = index_tar(str(path), workers=4)
    assert sorted(listing.inner) == ["n0.tar", "n1.tar", "n2.tar"]


def test_a_tar_of_many_class_tars_converts_as_its_tree(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "train.tar")
    tree = write_tree(tmp_path / "tree", {f"n{c:03d}/{name}": data for c in range(CLASSES)
                                          for name, data in _tree(c).items()})
    packer.convert(archive, tmp_path / "from-tar", to="lmdb", workers=1)
    packer.convert(tree, tmp_path / "from-tree", to="lmdb", workers=1)
    got = packer.open_dataset(tmp_path / "from-tar", decode=False)
    want = packer.open_dataset(tmp_path / "from-tree", decode=False)
    assert got.classes == want.classes and len(got) == len(want) == sum(1 + c % 3 for c in range(CLASSES))
    assert [(bytes(image), label) for image, label in got] == [(bytes(image), label) for image, label in want]
