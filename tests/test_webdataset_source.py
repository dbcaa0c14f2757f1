"""WebDataset shards as a source: samples grouped as ``webdataset`` groups them, the same
dataset as the tree they were made from, labels from cls or a JSON field, metadata kept, and
samples without image or label listed as skipped."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from imagetools import jpeg_bytes, png_bytes, standard_spec, write_tree
from sourcekinds import add_member, write_tar, write_tar_of_tars, write_webdataset

import packer
from packer.errors import SourceError, SourceNotFoundError
from packer.source.base import SourceOptions
from packer.source.registry import detect_kind
from packer.source.webdataset.source import WebDatasetSource

SHARD_SIZE = "3KB"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "src", standard_spec())


def _read(dst: Path) -> list[tuple[str, int, bytes]]:
    dataset = packer.open_dataset(dst, decode=False)
    return [(path, target, dataset[i][0]) for i, (path, target) in enumerate(dataset.samples)]


@pytest.mark.parametrize("label_field", [None, "json:label"])
def test_labels_come_from_the_field_and_the_rest_is_metadata(tmp_path: Path, tree: Path,
                                                            label_field: str | None) -> None:
    # That the samples equal the tree's, in every backend, is SourceContract's (test_contracts.py).
    shards = write_webdataset(tree, tmp_path / "wds", per_shard=4)
    result = packer.convert(tmp_path / "wds", tmp_path / "wds-dst", to="lmdb", shard_size=SHARD_SIZE,
                            label_field=label_field)
    manifest = result.manifest
    tree_classes = list(packer.scan_imagefolder(tree).classes)
    assert list(manifest.classes) == (tree_classes if label_field else ["0", "1", "2", "3"])
    assert manifest.extra["source"]["kind"] == "webdataset" and not manifest.skipped
    assert manifest.extra["webdataset"]["shards"] == len(shards) == 4
    metadata = packer.open_dataset(tmp_path / "wds-dst").metadata
    assert metadata[0]["json"] == {"label": "cat", "index": 0} and metadata[0]["txt"] == "caption 0"
    assert ("cls" in metadata[0]) == (label_field is not None)  # the label member is not metadata


def test_a_pattern_a_glob_and_one_shard_name_the_shards(tmp_path: Path, tree: Path) -> None:
    write_webdataset(tree, tmp_path / "wds", per_shard=4)
    everything = packer.plan_conversion(tmp_path / "wds", to="lmdb").num_images
    assert everything == 14
    for location, count in ((f"{tmp_path}/wds/shard-{{000000..000003}}.tar", 14),
                            (f"{tmp_path}/wds/shard-00000[01].tar", 8),
                            (f"{tmp_path}/wds/shard-000003.tar", 2)):
        assert packer.plan_conversion(location, to="lmdb").num_images == count
    for missing in (f"{tmp_path}/wds/shard-{{000000..000009}}.tar", f"{tmp_path}/wds/none-*.tar"):
        with pytest.raises(SourceNotFoundError, match="none-|000009"):
            packer.convert(missing, tmp_path / "dst", to="lmdb")
        assert not (tmp_path / "dst").exists()


def test_detection_tells_shards_from_archives_of_trees(tmp_path: Path, tree: Path) -> None:
    shards = write_webdataset(tree, tmp_path / "wds", per_shard=4)
    assert WebDatasetSource.looks_like_shard(str(shards[0]))
    assert detect_kind(str(shards[0])) == detect_kind(str(tmp_path / "wds")) == "webdataset"
    write_webdataset(tree, tmp_path / "cls-only", json_label=False, extra_members=False)
    assert detect_kind(str(tmp_path / "cls-only")) == "webdataset"
    for archive in (write_tar(tree, tmp_path / "tree.tar"),
                    write_tar_of_tars(tree, tmp_path / "classes.tar")):
        assert not WebDatasetSource.looks_like_shard(str(archive))
        assert detect_kind(str(archive)) == "archive"
    with tarfile.open(tmp_path / "flat.tar", "w") as tar:  # ILSVRC2012_img_val.tar: lone images
        for i in range(20):
            add_member(tar, f"ILSVRC2012_val_{i:08d}.JPEG", jpeg_bytes(seed=i))
    assert not WebDatasetSource.looks_like_shard(str(tmp_path / "flat.tar"))
    (tmp_path / "junk.tar").write_bytes(b"\x00\x01" * 900)
    assert not WebDatasetSource.looks_like_shard(str(tmp_path / "junk.tar"))


def _odd_shard(path: Path) -> Path:
    """Samples with a missing image, a missing label, a repeated key and a big member."""
    with tarfile.open(path, "w") as tar:
        for key, members in (
            ("s/0", {"jpg": jpeg_bytes(seed=0), "cls": b"1"}),
            ("s/1", {"cls": b"0", "json": b'{"note": "no image"}'}),
            ("s/2", {"png": png_bytes(seed=2), "json": b'{"label": 3}'}),
            ("s/3", {"jpg": jpeg_bytes(seed=3), "cls": b" 0\n", "txt": b"x" * (70 * 1024)}),
            ("s/0", {"jpg": b"<html>not an image</html>", "cls": b"2"}),
            ("s/4", {"jpg": jpeg_bytes(seed=4), "cls": b"zero"}),
        ):
            for ext, data in members.items():
                add_member(tar, f"{key}.{ext}", data)
        add_member(tar, "README", b"no extension")
    return path


def test_samples_without_image_or_label_are_listed_as_skipped(tmp_path: Path) -> None:
    shard = _odd_shard(tmp_path / "odd.tar")
    with pytest.raises(SourceError, match="mix numbers"):
        packer.convert(shard, tmp_path / "mixed", to="lmdb")
    assert not (tmp_path / "mixed").exists()
    _rewrite_without(shard, "s/4.cls")  # no text label left: s/4 now lacks a label
    result = packer.convert(shard, tmp_path / "dst", to="lmdb")
    samples = _read(tmp_path / "dst")
    assert [(path, target) for path, target, _ in samples] == [("s/0.jpg", 1), ("s/3.jpg", 0)]
    assert {(s.path, s.reason) for s in result.manifest.skipped} == {
        ("s/1", "missing_image"), ("s/2.png", "missing_label"), ("s/0~2.jpg", "not_an_image"),
        ("s/4.jpg", "missing_label")}
    assert result.found == len(samples) + len(result.manifest.skipped) == 6
    notes = " ".join(result.manifest.extra["source"]["report"]["notes"])
    assert "no extension" in notes and "occur again" in notes and "not kept" in notes
    assert list(result.manifest.classes) == ["0", "1", "2"]


def _rewrite_without(shard: Path, name: str) -> None:
    with tarfile.open(shard) as tar:
        kept = [(info, tar.extractfile(info).read()) for info in tar.getmembers()  # type: ignore[union-attr]
                if info.name != name]
    with tarfile.open(shard, "w") as tar:
        for info, data in kept:
            add_member(tar, info.name, data)


def test_a_nested_json_label_and_a_missing_label_member_are_explained(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "n.tar", "w") as tar:
        for i, name in enumerate(["dog", "cat", "dog"]):
            add_member(tar, f"{i}.jpg", jpeg_bytes(seed=i))
            add_member(tar, f"{i}.json", json.dumps({"meta": {"label": name}}).encode())
    result = packer.convert(tmp_path / "n.tar", tmp_path / "dst", to="lmdb", label_field="json:meta.label")
    assert list(result.manifest.classes) == ["cat", "dog"]
    assert list(packer.open_dataset(tmp_path / "dst").targets) == [1, 0, 1]
    with pytest.raises(SourceError, match=r"no sample has a usable label in 'cls'.*jpg, json"):
        packer.convert(tmp_path / "n.tar", tmp_path / "nolabel", to="lmdb")
    with pytest.raises(SourceError, match="apply to a tree, archive, masks or YOLO"):
        WebDatasetSource(str(tmp_path / "n.tar"), SourceOptions(include_hidden=True))


@pytest.mark.slow
def test_one_reader_serves_threads_over_more_shards_than_it_keeps_open(tmp_path: Path, tree: Path) -> None:
    """``update --checksum`` hashes items in threads with one reader: with 20 shards, handles
    are evicted while other threads read."""
    import hashlib
    import pickle
    from concurrent.futures import ThreadPoolExecutor
    write_webdataset(tree, tmp_path / "wds", per_shard=1)
    for i in range(6):  # 20 shards: more than the reader keeps open
        with tarfile.open(tmp_path / "wds" / f"shard-{100 + i:06d}.tar", "w") as tar:
            add_member(tar, f"extra/{i}.png", png_bytes(seed=50 + i))
            add_member(tar, f"extra/{i}.cls", b"0")
    source = WebDatasetSource(str(tmp_path / "wds"), SourceOptions())
    items = source.scan().items * 3
    reader = pickle.loads(pickle.dumps(source.reader()))
    assert len(pickle.dumps(reader)) < 6000
    want = [hashlib.sha256(reader.read(item)).hexdigest() for item in items]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(reader.digest, items)) == want
    reader.close()


def test_gzip_compressed_shards_read_through_a_spool_removed_at_the_end(
        tmp_path: Path, tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gzip
    import shutil
    monkeypatch.setenv("PACKER_SPOOL_DIR", str(tmp_path / "spool"))
    (tmp_path / "gz").mkdir()
    for shard in write_webdataset(tree, tmp_path / "wds", per_shard=5):
        with open(shard, "rb") as plain, gzip.open(tmp_path / "gz" / f"{shard.name}.gz", "wb") as packed_file:
            shutil.copyfileobj(plain, packed_file)
    packer.convert(tmp_path / "wds", tmp_path / "plain", to="lmdb")
    packer.convert(f"{tmp_path}/gz/*.tar.gz", tmp_path / "dst", to="lmdb")
    assert _read(tmp_path / "dst") == _read(tmp_path / "plain")
    assert not list((tmp_path / "spool").glob("*.tar"))
