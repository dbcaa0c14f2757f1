"""A tar of many class tars (ImageNet's training tar) has its member tars indexed by this process
and a pool, each claiming shares from a shared counter: the listing is the very one a single
process makes (members, offsets, notes, errors, order), whoever indexed which share, and
converting it gives the same dataset as the tree it holds."""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

import pytest
from imagetools import image_bytes, write_tree

import packer
from packer.errors import SourceError
from packer.source.archive import tarindex
from packer.source.archive.files import open_archive_file
from packer.source.archive.members import CORRUPT, DIR, FILE, LINK, TRUNCATED, Member
from packer.source.archive.tarindex import PARALLEL_INNER, index_tar
from packer.source.archive.tarwalk import ArchiveOuter

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


def test_shares_indexed_by_the_pool_come_back_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process is slowed, so that the pool's process claims shares; those listings, sent
    back as columns, equal one process's."""
    archive = _archive(tmp_path / "train.tar", damaged=True)
    alone, _ = index_tar(str(archive), workers=1)
    parent, index_member_tar = os.getpid(), tarindex.index_member_tar
    taken_in: list[int] = []
    from_columns = tarindex._from_columns

    def slow_here(outer: object, member: Member) -> object:
        if os.getpid() == parent:
            time.sleep(0.01)
        return index_member_tar(outer, member)  # type: ignore[arg-type]

    def counted(flat: tarindex._Columns) -> tuple[Member, ...]:
        taken_in.append(flat[0])
        return from_columns(flat)

    monkeypatch.setattr(tarindex, "index_member_tar", slow_here)  # forked: the pool's process has it too
    monkeypatch.setattr(tarindex, "_from_columns", counted)
    pooled, _ = index_tar(str(archive), workers=2)
    assert taken_in, "the pool's process indexed no share"
    assert len(taken_in) < CLASSES + 2, "this process indexed no share"
    assert pooled == alone and list(pooled.inner) == list(alone.inner)


def test_a_pool_process_failing_fails_the_index(tmp_path: Path) -> None:
    archive = _archive(tmp_path / "train.tar")
    alone, _ = index_tar(str(archive), workers=1)

    changed = pytest.raises(SourceError, match="changed while it was indexed")
    with open_archive_file(str(archive)) as file, changed:
        size = archive.stat().st_size
        tarindex._index_pending(ArchiveOuter(file), str(archive), size + 1,  # type: ignore[arg-type]
                                list(alone.members), 2)


@pytest.mark.parametrize("members", [
    (),
    (Member("a.jpg", FILE, 512, 10, 5),),
    (Member("a", DIR, 512, 0, 0), Member("a/b.jpg", FILE, 1024, 7, 1_600_000_000_000_000_000, TRUNCATED),
     Member("a/l", LINK, 2048, 0, -3, target="b.jpg"), Member("a/c", FILE, 2 ** 62, 2 ** 40, 0, CORRUPT)),
])
def test_members_as_columns_come_back_field_for_field(members: tuple[Member, ...]) -> None:
    back = tarindex._from_columns(tarindex._as_columns(members))
    assert back == members
    assert all(type(member) is Member for member in back)
    assert [tuple(map(type, member)) for member in back] == [tuple(map(type, member)) for member in members]


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
