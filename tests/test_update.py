"""``packer update`` and ``packer gc``: an update equals a fresh conversion, writes only what
changed, never touches the version a reader opened, and survives being killed."""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from imagetools import dataset_snapshot, image_bytes, jpeg_bytes, tree_files, write_tree

import packer
from packer.cli import cli
from packer.conversion.destination.lock import dataset_lock
from packer.errors import DatasetBusyError, NotADatasetError, OutputError, VersionGoneError
from packer.format.backends import Backend
from packer.format.shardset import ShardSet

SHARD_SIZE = "3kB"  # the tree below becomes about a dozen shards


def make_source(root: Path, count: int = 14) -> Path:
    """Three classes of JPEGs of varied sizes, and BMPs (same-size files, for --checksum)."""
    spec: dict[str, bytes] = {}
    for cls_number, cls in enumerate(("ant", "bee", "cow")):
        for i in range(count):
            seed = cls_number * 100 + i
            spec[f"{cls}/{i:03d}.jpg"] = jpeg_bytes(14 + seed % 9, 12 + seed % 7, seed)
        spec[f"{cls}/pic.bmp"] = image_bytes(".bmp", 6, 5, cls_number)
    return write_tree(root, spec)


def convert(src: Path, dst: Path, backend: str) -> packer.ConversionResult:
    return packer.convert(src, dst, to=backend, shard_size=SHARD_SIZE, workers=1)


def _add_to_one_class(src: Path) -> None:
    for i in range(3):
        (src / "bee" / f"new{i}.jpg").write_bytes(jpeg_bytes(20, 17, 900 + i))


def _remove_across_classes(src: Path) -> None:
    for path in ("ant/002.jpg", "bee/007.jpg", "cow/011.jpg"):
        (src / path).unlink()


def _change_one(src: Path) -> None:
    (src / "bee" / "004.jpg").write_bytes(jpeg_bytes(30, 20, 777))


def _new_class_last(src: Path) -> None:
    for i in range(5):
        (src / "zebra" / f"{i}.jpg").parent.mkdir(exist_ok=True)
        (src / "zebra" / f"{i}.jpg").write_bytes(jpeg_bytes(16, 16, 500 + i))


def _new_class_first(src: Path) -> None:  # every sample's label moves up by one
    (src / "aardvark").mkdir()
    (src / "aardvark" / "x.jpg").write_bytes(jpeg_bytes(15, 15, 600))


def _move_between_classes(src: Path) -> None:
    os.replace(src / "ant" / "005.jpg", src / "cow" / "005b.jpg")


def _add_a_broken_file(src: Path) -> None:
    (src / "cow" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")


EDITS: dict[str, Callable[[Path], None]] = {
    "added": _add_to_one_class, "removed": _remove_across_classes, "changed": _change_one,
    "new_class_last": _new_class_last, "new_class_first": _new_class_first,
    "moved": _move_between_classes, "broken": _add_a_broken_file,
}


def shard_stats(dst: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in dst.glob("shard-*")}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_update_equals_a_fresh_conversion_and_rewrites_nothing(tmp_path: Path, backend: Backend,
                                                                  edit: str) -> None:
    src, dst, fresh = make_source(tmp_path / "src"), tmp_path / "dst", tmp_path / "fresh"
    first = convert(src, dst, backend.name).manifest
    before = shard_stats(dst)
    EDITS[edit](src)
    result = packer.update(src, dst, workers=1)
    convert(src, fresh, backend.name)

    assert result.version == 2 and result.from_version == 1 and not result.up_to_date
    manifest = result.manifest
    assert manifest.last_update["shards_written"] == result.shards_written
    assert result.shards_written + result.shards_reused == len(manifest.shards)
    assert result.shards_reused >= 1
    # No file of version 1 was rewritten: the reused ones are the same inodes, untouched.
    for name, stat in before.items():
        assert shard_stats(dst)[name] == stat
    reused = {s.path for s in manifest.shards} & {s.path for s in first.shards}
    assert len(reused) >= result.shards_reused
    # Version 1 is still whole next to version 2 ...
    assert ShardSet(dst, 1).manifest == first
    # ... and once it is collected, DST is byte for byte a fresh conversion (bar timestamps).
    packer.collect_garbage(dst)
    assert dataset_snapshot(dst) == dataset_snapshot(fresh)


def test_counts_and_what_an_update_writes(tmp_path: Path) -> None:
    src, dst = make_source(tmp_path / "src"), tmp_path / "dst"
    convert(src, dst, "lmdb")
    before = set(shard_stats(dst))
    _add_to_one_class(src)
    _remove_across_classes(src)
    _change_one(src)
    result = packer.update(src, dst, workers=1)
    assert (result.files_added, result.files_removed, result.files_changed) == (3, 3, 1)
    # edits in about five places: a shard each, and a neighbour where a boundary moved
    assert 1 <= result.shards_written <= 8 < result.shards_written + result.shards_reused
    assert result.bytes_written == sum(s.num_bytes for s in result.manifest.shards if s.path not in before)
    again = packer.update(src, dst, workers=1)
    assert again.up_to_date and again.version == 2 and again.shards_written == 0


def test_a_dry_run_writes_nothing(tmp_path: Path) -> None:
    src, dst = make_source(tmp_path / "src"), tmp_path / "dst"
    convert(src, dst, "hdf5")
    _add_to_one_class(src)
    files = tree_files(dst)
    result = packer.update(src, dst, dry_run=True)
    assert result.dry_run and result.files_added == 3 and result.shards_written >= 1
    assert result.version == 1
    assert tree_files(dst) == files
    assert not (dst / ".packer-lock").exists()


def test_checksum_finds_a_change_that_kept_size_and_mtime(tmp_path: Path) -> None:
    src, dst, fresh = make_source(tmp_path / "src"), tmp_path / "dst", tmp_path / "fresh"
    convert(src, dst, "lmdb")
    target = src / "bee" / "pic.bmp"
    stat = target.stat()
    replacement = image_bytes(".bmp", 6, 5, 42)
    assert len(replacement) == stat.st_size and replacement != target.read_bytes()
    target.write_bytes(replacement)
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    # By size and mtime the file looks unchanged: that is what --checksum is for.
    assert packer.update(src, dst).up_to_date
    result = packer.update(src, dst, checksum=True, workers=1)
    assert result.files_changed == 1 and result.shards_written >= 1 and result.version == 2
    assert result.manifest.last_update["checksum"] is True
    convert(src, fresh, "lmdb")
    packer.collect_garbage(dst)
    assert dataset_snapshot(dst) == dataset_snapshot(fresh)
    # Timestamps that moved without a change in content rewrite nothing under --checksum.
    for path in (src / "ant").iterdir():
        os.utime(path, ns=(1, 10**18))
    touched = packer.update(src, dst, checksum=True, workers=1)
    assert touched.shards_written == 0 and touched.files_changed == 0


def test_a_reader_keeps_the_version_it_opened(tmp_path: Path, backend: Backend) -> None:
    src, dst = make_source(tmp_path / "src"), tmp_path / "dst"
    convert(src, dst, backend.name)
    ds = packer.open_dataset(dst, decode=False)
    old = [ds[i] for i in range(len(ds))]
    pickled = pickle.dumps(ds)  # what a worker started later receives
    _add_to_one_class(src)
    _remove_across_classes(src)
    packer.update(src, dst, workers=1)
    assert [ds[i] for i in range(len(ds))] == old
    assert [pickle.loads(pickled)[i] for i in range(len(ds))] == old
    assert len(packer.open_dataset(dst)) == len(old)  # 3 added, 3 removed
    assert packer.open_dataset(dst).manifest.version == 2
    packer.collect_garbage(dst, keep_versions=2)
    assert [pickle.loads(pickled)[i] for i in range(len(ds))] == old
    packer.collect_garbage(dst)
    with pytest.raises(VersionGoneError, match="Version 1 .* gone.*open the dataset again"):
        pickle.loads(pickled)


def test_gc_keeps_what_kept_versions_use(tmp_path: Path) -> None:
    src, dst = make_source(tmp_path / "src"), tmp_path / "dst"
    convert(src, dst, "lmdb")
    for edit in (_add_to_one_class, _change_one, _remove_across_classes):
        edit(src)
        packer.update(src, dst, workers=1)
    assert sorted(p.name for p in (dst / "versions").iterdir()) == [f"0000{v}.json" for v in (1, 2, 3, 4)]
    dry = packer.collect_garbage(dst, keep_versions=2, dry_run=True)
    assert dry.removed_versions == (1, 2) and dry.removed_files and not any(
        not (dst / name).exists() for name in dry.removed_files)
    done = packer.collect_garbage(dst, keep_versions=2)
    assert done.kept_versions == (3, 4) and done.removed_files == dry.removed_files
    for version in (3, 4):
        shards = ShardSet(dst, version)
        assert all(shards.read(i) for i in range(len(shards)))
        assert packer.verify_dataset(dst).ok
    left = {p.name for p in dst.glob("shard-*")}
    used = {s.path for v in (3, 4) for s in packer.Manifest.load(dst, v).shards}
    assert left == used
    with pytest.raises(ValueError, match="at least 1"):
        packer.collect_garbage(dst, keep_versions=0)


def test_update_and_gc_refuse_while_another_holds_the_lock(tmp_path: Path) -> None:
    src, dst = make_source(tmp_path / "src", count=3), tmp_path / "dst"
    convert(src, dst, "lmdb")
    with dataset_lock(str(dst), "test"):
        busy = rf"Cannot update .*in use by test by host .* pid {os.getpid()} since"
        with pytest.raises(DatasetBusyError, match=busy):
            packer.update(src, dst)
        with pytest.raises(DatasetBusyError):
            packer.collect_garbage(dst)
    assert packer.update(src, dst).up_to_date


def test_update_needs_a_complete_dataset_of_format_2(tmp_path: Path) -> None:
    src, dst = make_source(tmp_path / "src", count=3), tmp_path / "dst"
    with pytest.raises(NotADatasetError):
        packer.update(src, tmp_path / "nothing")
    convert(src, dst, "lmdb")
    manifest = json.loads((dst / "index.json").read_text())
    manifest["format_version"] = 1
    manifest.pop("digest", None)  # packer 0.1 hashed with SHA-256 (a format-1 manifest says nothing)
    del manifest["extra"]["options"]
    (dst / "index.json").write_text(json.dumps(manifest))
    with pytest.raises(OutputError, match=r"packer 0\.1.*upgrade\(src, dst\)"):
        packer.update(src, dst)


def test_a_list_source_relabelled_rewrites_no_shard(tmp_path: Path) -> None:
    src = make_source(tmp_path / "src", count=6)
    rows = sorted(p.relative_to(src).as_posix() for p in src.rglob("*.jpg"))
    listing = tmp_path / "src" / "labels.csv"
    listing.write_text("path,label,note\n" + "".join(f"{r},{r[:3]},n{i}\n" for i, r in enumerate(rows)))
    dst, fresh = tmp_path / "dst", tmp_path / "fresh"
    convert(listing, dst, "hdf5")
    relabelled = [f"{r},{'bee' if i % 2 else r[:3]},m{i}\n" for i, r in enumerate(rows)]
    listing.write_text("path,label,note\n" + "".join(relabelled))
    result = packer.update(listing, dst, workers=1)
    assert result.shards_written == 0 and result.version == 2
    ds = packer.open_dataset(dst, decode=False)
    assert ds.metadata[1] == {"note": "m1"} and ds.classes[ds.targets[1]] == "bee"
    convert(listing, fresh, "hdf5")
    packer.collect_garbage(dst)
    assert dataset_snapshot(dst) == dataset_snapshot(fresh)


def test_the_command_line(tmp_path: Path) -> None:
    src, dst = make_source(tmp_path / "src", count=4), tmp_path / "dst"
    convert(src, dst, "lmdb")
    _add_to_one_class(src)
    runner = CliRunner()
    dry = runner.invoke(cli, ["update", str(src), str(dst), "--dry-run"])
    assert dry.exit_code == 0 and "3 added" in dry.output and "Nothing was written" in dry.output
    done = runner.invoke(cli, ["update", str(src), str(dst), "--workers", "1"])
    assert done.exit_code == 0, done.output
    assert "from version 1 to 2" in done.output and "packer gc" in done.output
    info = runner.invoke(cli, ["info", str(dst)])
    assert "version 2 (older versions kept: 1" in info.output
    assert "last update from version 1: files +3 -0 ~0" in info.output
    as_json = runner.invoke(cli, ["update", str(src), str(dst), "--json"])
    assert json.loads(as_json.output)["up_to_date"] is True
    collected = runner.invoke(cli, ["gc", str(dst)])
    assert collected.exit_code == 0 and "removed version(s) 1" in collected.output
    missing = runner.invoke(cli, ["update", str(src), str(tmp_path / "none")])
    assert missing.exit_code == 1 and "not" in missing.stderr and len(missing.stderr.splitlines()) == 1


def test_keep_versions_collects_after_the_update(tmp_path: Path) -> None:
    src, dst = make_source(tmp_path / "src", count=5), tmp_path / "dst"
    convert(src, dst, "lmdb")
    _add_to_one_class(src)
    result = packer.update(src, dst, workers=1, keep_versions=1)
    assert result.version == 2 and result.collected is not None
    assert result.collected.removed_versions == (1,) and result.collected.kept_versions == (2,)
    assert sorted(p.name for p in (dst / "versions").iterdir()) == ["00002.json"]
    assert {p.name for p in dst.glob("shard-*")} == {s.path for s in result.manifest.shards}
    again = packer.update(src, dst, keep_versions=1)  # up to date: collects all the same
    assert again.up_to_date and again.collected is not None and again.collected.removed_files == ()
