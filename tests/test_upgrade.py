"""``packer upgrade``: a dataset packer 0.1 wrote (format 1) becomes one ``update`` works on,
without a shard rewritten or renamed; a source that no longer gives its samples is refused
and nothing changes; ``update`` on a 0.1 dataset refuses and names ``upgrade``."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from imagetools import dataset_snapshot, image_bytes, jpeg_bytes, tree_files, write_tree

import packer
import packer.format.manifest
from packer.cli import cli
from packer.conversion.destination.lock import dataset_lock
from packer.conversion.options import ConversionOptions
from packer.conversion.sharding import cut_greedily
from packer.errors import DatasetBusyError, OutputError, SourceChangedError
from packer.format.backends import BACKENDS, Backend, get_backend
from packer.format.manifest import FileEntry, Manifest, ScanInfo, ShardEntry, SkippedFile
from packer.format.sample_index import SampleIndex
from packer.format.shardset import ShardSet
from packer.source.imagefolder import IMG_EXTENSIONS, scan_imagefolder
from packer.source.sourcefile import UnpackableFile
from packer.testing.faults import exit_code_of, kill_self

SHARD_SIZE = 3000  # the tree below makes a handful of shards


def make_source(root: Path, count: int = 6) -> Path:
    """Three classes of JPEGs of varied sizes, a BMP each, and a file that is not an image."""
    spec: dict[str, bytes] = {}
    for number, cls in enumerate(("ant", "bee", "cow")):
        for i in range(count):
            seed = number * 100 + i
            spec[f"{cls}/{i:03d}.jpg"] = jpeg_bytes(14 + seed % 9, 12 + seed % 7, seed)
        spec[f"{cls}/pic.bmp"] = image_bytes(".bmp", 6, 5, number)
    spec["bee/broken.jpg"] = b"not an image at all"
    return write_tree(root, spec)


def convert_like_0_1(src: Path, dst: Path, backend: str, *, codec: str = "original") -> None:
    """Write what packer 0.1 wrote for the tree ``src`` (format 1): shards cut at fixed byte
    counts and named by number, ``samples/targets.npy``, ``path_offsets.npy`` and ``paths.bin``,
    one ``index.json`` without versions, source identities or options."""
    options = ConversionOptions(to=backend, shard_size=SHARD_SIZE, codec=codec)
    index = scan_imagefolder(src)
    dst.mkdir()
    (dst / "samples").mkdir()
    shards: list[ShardEntry] = []
    relpaths: list[str] = []
    targets: list[int] = []
    skipped: list[SkippedFile] = []
    for number, (start, stop) in enumerate(cut_greedily([i.size for i in index.items], 0, len(index.items),
                                                        SHARD_SIZE)):
        payloads = []
        for item in index.items[start:stop]:
            try:
                payloads.append(options.stored_as.encode((src / item.relpath).read_bytes(), check="full",
                                                         max_pixels=options.max_pixels))
            except UnpackableFile as err:
                skipped.append(SkippedFile(item.relpath, err.reason, err.detail))
                continue
            relpaths.append(item.relpath)
            targets.append(item.label)
        name = f"shard-{number:05d}{options.backend.suffix}"
        with options.backend.writer(str(dst / name), capacity=sum(map(len, payloads)) or 1) as writer:
            for payload in payloads:
                writer.write(payload)
        shards.append(ShardEntry(name, len(relpaths) - len(payloads), len(payloads),
                                 (dst / name).stat().st_size, _sha(dst / name)))
    offsets = np.zeros(len(relpaths) + 1, dtype=np.int64)
    np.cumsum([len(r.encode()) for r in relpaths], out=offsets[1:])
    np.save(dst / "samples" / "targets.npy", np.asarray(targets, dtype=np.int64))
    np.save(dst / "samples" / "path_offsets.npy", offsets)
    (dst / "samples" / "paths.bin").write_bytes("".join(relpaths).encode())
    names = {"targets": "targets.npy", "path_offsets": "path_offsets.npy", "paths": "paths.bin"}
    sample_index = {key: FileEntry(f"samples/{name}", (dst / "samples" / name).stat().st_size,
                                   _sha(dst / "samples" / name)) for key, name in names.items()}
    counts = [targets.count(label) for label in range(len(index.classes))]
    manifest = Manifest(
        backend=backend, codec=codec, codec_params=options.stored_as.params(), check="full",
        max_pixels=options.max_pixels, classes=tuple(index.classes), class_counts=tuple(counts),
        shards=tuple(shards), sample_index=sample_index, skipped=tuple(skipped),
        scan=ScanInfo("extensions", IMG_EXTENSIONS, False, "walked_once"), source=str(src),
        created_by="packer 0.1.0", created_at="2026-06-01T00:00:00+00:00", format_version=1,
        extra={"shard_size": SHARD_SIZE, "plan_fingerprint": "0" * 64})
    data = manifest.to_dict()
    for field in ("version", "last_update"):
        del data[field]
    for shard in data["shards"]:
        del shard["inputs"], shard["contents"]
    for skip in data["skipped"]:
        del skip["size"], skip["mtime_ns"]
    (dst / "index.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shard_files(dst: Path) -> dict[str, tuple[int, int, str]]:
    """Each shard file: its inode, mtime and SHA-256 (the same inode and mtime: untouched)."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, _sha(p)) for p in sorted(dst.glob("shard-*"))}


def samples_of(dst: Path) -> list[tuple[bytes, int]]:
    dataset = packer.open_dataset(dst, decode=False)
    return [dataset[i] for i in range(len(dataset))]


def test_a_0_1_dataset_is_upgraded_in_place_then_updates_like_any(tmp_path: Path, backend: Backend) -> None:
    src, dst, fresh = make_source(tmp_path / "src"), tmp_path / "dst", tmp_path / "fresh"
    convert_like_0_1(src, dst, backend.name)
    before = samples_of(dst)  # a 0.1 dataset opens and reads as it always did
    assert [data for data, _ in before] == [(src / p).read_bytes() for p in _packed_paths(dst)]
    assert packer.verify_dataset(dst).ok
    shards_then, index_then = shard_files(dst), (dst / "samples" / "paths.bin").read_bytes()

    result = packer.upgrade(src, dst, workers=2)

    assert not result.already_current and result.bytes_compared
    assert result.samples_compared == len(before) and result.shards_kept == len(shards_then) > 1
    assert result.shards_reusable == 0  # 0.1's shards: cut at fixed sizes, named by number
    manifest = packer.Manifest.load(dst)
    assert manifest.format_version == 2 and manifest.version == 1
    assert (dst / "versions" / "00001.json").read_text() == (dst / "index.json").read_text()
    assert shard_files(dst) == shards_then  # every shard file kept: same name, inode, mtime, bytes
    assert [s.path for s in manifest.shards] == sorted(shards_then)
    assert manifest.sample_index["paths"].path == "samples/paths.bin"  # 0.1's index files, named as they were
    assert (dst / "samples" / "paths.bin").read_bytes() == index_then
    sources = np.load(dst / manifest.sample_index["sources"].path)
    assert sources.shape == (len(before), 3) and sources[0, 0] == (src / _packed_paths(dst)[0]).stat().st_size
    assert [s.path for s in manifest.skipped] == ["bee/broken.jpg"] and manifest.skipped[0].size == 19
    assert manifest.extra["options"]["shard_size"] == SHARD_SIZE
    assert manifest.extra["upgraded"]["from_format_version"] == 1
    assert samples_of(dst) == before and packer.verify_dataset(dst).ok

    # Identities recorded: the first update counts exactly what changed ...
    (src / "bee" / "new.jpg").write_bytes(jpeg_bytes(20, 17, 900))
    (src / "ant" / "002.jpg").unlink()
    (src / "cow" / "004.jpg").write_bytes(jpeg_bytes(30, 20, 777))
    updated = packer.update(src, dst, workers=1)
    assert (updated.files_added, updated.files_removed, updated.files_changed) == (1, 1, 1)
    # ... and writes every shard in the current layout, while version 1 stays whole.
    assert updated.version == 2 and updated.shards_reused == 0
    assert shard_files(dst).items() >= shards_then.items()
    assert ShardSet(dst, 1).manifest == manifest
    packer.convert(src, fresh, to=backend.name, shard_size=SHARD_SIZE, workers=1)
    packer.collect_garbage(dst)
    assert dataset_snapshot(dst) == dataset_snapshot(fresh)  # the same as a fresh conversion
    # From now on an update writes only near a change.
    (src / "cow" / "new.jpg").write_bytes(jpeg_bytes(18, 18, 901))
    assert packer.update(src, dst, workers=1).shards_reused >= 1


def _packed_paths(dst: Path) -> list[str]:
    manifest = packer.Manifest.load(dst)
    index = SampleIndex.of(str(dst), manifest)
    return [index.path(i) for i in range(manifest.num_samples)]


def _add(src: Path) -> None:
    (src / "cow" / "extra.jpg").write_bytes(jpeg_bytes(15, 15, 600))


def _remove(src: Path) -> None:
    (src / "ant" / "003.jpg").unlink()


def _same_size_other_bytes(src: Path) -> None:  # only a byte comparison finds it
    path = src / "bee" / "001.jpg"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns - 10**9))


def _rename_class(src: Path) -> None:
    os.replace(src / "ant", src / "ants")


def _fix_a_broken_file(src: Path) -> None:
    (src / "bee" / "broken.jpg").write_bytes(jpeg_bytes(12, 12, 5))


REFUSED: dict[str, tuple[Callable[[Path], None], str, int]] = {
    "added": (_add, r"cow/extra\.jpg \(added\)", 1),
    "removed": (_remove, r"ant/003\.jpg \(removed\)", 1),
    "changed": (_same_size_other_bytes, r"bee/001\.jpg \(changed\)", 1),
    "renamed class": (_rename_class, r"ants/ \(class added\), ant/ \(class removed\), ants/000\.jpg "
                                     r"\(added\).* and \d+ more", 2 + 2 * 7),
    "skipped packs now": (_fix_a_broken_file, r"bee/broken\.jpg \(can be packed now, was skipped\)", 1),
}


def test_a_source_that_differs_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    src, dst = make_source(tmp_path / "src"), tmp_path / "dst"
    convert_like_0_1(src, dst, "lmdb")
    files = tree_files(dst)
    for name, (edit, named, count) in REFUSED.items():
        edited = tmp_path / name.replace(" ", "_")
        shutil.copytree(src, edited)
        edit(edited)
        with pytest.raises(SourceChangedError, match=named) as info:
            packer.upgrade(edited, dst)
        assert info.value.count == count == len(info.value.differing), name
        assert "Nothing was changed" in str(info.value)
        assert "convert(src, dst, overwrite=True)" in str(info.value)
        assert tree_files(dst) == files, name  # not even a lock file
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is SourceChangedError and again.differing == info.value.differing
    assert packer.upgrade(src, dst).samples_compared == 21  # the source as it was still upgrades


def test_a_codec_that_re_encodes_compares_what_it_can(tmp_path: Path) -> None:
    src, dst = make_source(tmp_path / "src", count=3), tmp_path / "dst"
    convert_like_0_1(src, dst, "hdf5", codec="pixels")
    _add(src)
    with pytest.raises(SourceChangedError, match="extra.jpg"):
        packer.upgrade(src, dst)
    (src / "cow" / "extra.jpg").unlink()
    result = packer.upgrade(src, dst)
    assert not result.bytes_compared and not packer.Manifest.load(dst).extra["upgraded"]["bytes_compared"]
    assert "records" in packer.Manifest.load(dst).sample_index and packer.verify_dataset(dst).ok


def test_upgrade_on_a_current_dataset_does_nothing(tmp_path: Path) -> None:
    src, dst = make_source(tmp_path / "src", count=3), tmp_path / "dst"
    convert_like_0_1(src, dst, "lmdb")
    packer.upgrade(src, dst)
    files = tree_files(dst)
    again = packer.upgrade(tmp_path / "no-such-source", dst)  # nothing is read
    assert again.already_current and again.manifest.version == 1 and tree_files(dst) == files


def test_a_format_1_manifest_over_shards_of_0_2_keeps_them_reusable(tmp_path: Path) -> None:
    src, dst, fresh = make_source(tmp_path / "src"), tmp_path / "dst", tmp_path / "fresh"
    packer.convert(src, dst, to="lmdb", shard_size=SHARD_SIZE, workers=1)
    data = json.loads((dst / "index.json").read_text())
    data["format_version"] = 1
    del data["extra"]["options"]
    (dst / "index.json").write_text(json.dumps(data))
    shards_then = shard_files(dst)
    result = packer.upgrade(src, dst)
    assert result.shards_reusable == result.shards_kept == len(shards_then)
    assert packer.update(src, dst).up_to_date
    (src / "cow" / "004.jpg").write_bytes(jpeg_bytes(30, 20, 777))
    updated = packer.update(src, dst, workers=1)
    assert updated.shards_reused >= 1 and shard_files(dst).items() >= shards_then.items()
    packer.convert(src, fresh, to="lmdb", shard_size=SHARD_SIZE, workers=1)
    packer.collect_garbage(dst)
    assert dataset_snapshot(dst) == dataset_snapshot(fresh)


def _killed_at_the_switch(src: Path, dst: Path) -> Callable[[], None]:
    def run() -> None:
        write = packer.format.manifest.atomic_write_bytes

        def write_or_die(path: Any, data: bytes) -> None:
            if os.path.basename(path) == "index.json":
                kill_self()
            write(path, data)

        packer.format.manifest.atomic_write_bytes = write_or_die  # type: ignore[assignment]
        packer.upgrade(src, dst, workers=1)

    return run


def test_an_upgrade_killed_before_the_switch_leaves_the_0_1_dataset(tmp_path: Path) -> None:
    src, dst = make_source(tmp_path / "src", count=3), tmp_path / "dst"
    convert_like_0_1(src, dst, "lmdb")
    manifest_then, samples_then = (dst / "index.json").read_text(), samples_of(dst)
    shards_then = shard_files(dst)
    assert exit_code_of(_killed_at_the_switch(src, dst)) == -9
    assert (dst / "versions" / "00001.json").exists()  # killed right before index.json
    assert (dst / "index.json").read_text() == manifest_then
    assert samples_of(dst) == samples_then and shard_files(dst) == shards_then
    assert packer.Manifest.load(dst).format_version == 1
    assert packer.upgrade(src, dst).samples_compared == len(samples_then)  # run again: done
    assert packer.Manifest.load(dst).format_version == 2 and samples_of(dst) == samples_then


def test_update_on_a_0_1_dataset_names_upgrade(tmp_path: Path) -> None:
    src, dst = make_source(tmp_path / "src", count=3), tmp_path / "dst"
    convert_like_0_1(src, dst, "lmdb")
    with pytest.raises(OutputError, match=r"packer 0\.1.*upgrade\(src, dst\)"):
        packer.update(src, dst)
    out = CliRunner().invoke(cli, ["update", str(src), str(dst)])
    assert out.exit_code == 1 and len(out.stderr.splitlines()) == 1
    assert "packer upgrade SRC DST" in out.stderr and "upgrade(" not in out.stderr


def test_the_command_line(tmp_path: Path) -> None:
    src, dst = make_source(tmp_path / "src", count=3), tmp_path / "dst"
    convert_like_0_1(src, dst, "lmdb")
    runner = CliRunner()
    (src / "ant" / "000.jpg").unlink()
    refused = runner.invoke(cli, ["upgrade", str(src), str(dst)])
    assert refused.exit_code == 1 and len(refused.stderr.splitlines()) == 1
    assert "ant/000.jpg (removed)" in refused.stderr
    assert "packer convert SRC DST --overwrite" in refused.stderr
    (src / "ant" / "000.jpg").write_bytes(jpeg_bytes(14, 12, 0))
    done = runner.invoke(cli, ["upgrade", str(src), str(dst), "--workers", "1"])
    assert done.exit_code == 0, done.output
    assert f"Upgraded {dst} to format 2 (version 1): 12 samples in 3 classes" in done.output
    assert "byte for byte" in done.output and "its first run rewrites" in done.output
    again = runner.invoke(cli, ["upgrade", str(src), str(dst), "--json"])
    assert again.exit_code == 0 and json.loads(again.output)["already_current"] is True
    assert "nothing to upgrade" in runner.invoke(cli, ["upgrade", str(src), str(dst)]).output
    missing = runner.invoke(cli, ["upgrade", str(src), str(tmp_path / "none")])
    assert missing.exit_code == 1 and len(missing.stderr.splitlines()) == 1


def test_upgrade_refuses_while_another_holds_the_lock(tmp_path: Path) -> None:
    src, dst = make_source(tmp_path / "src", count=3), tmp_path / "dst"
    convert_like_0_1(src, dst, "lmdb")
    manifest_then = (dst / "index.json").read_text()
    with dataset_lock(str(dst), "test"), pytest.raises(DatasetBusyError, match="Cannot upgrade"):
        packer.upgrade(src, dst)
    assert (dst / "index.json").read_text() == manifest_then
    assert packer.upgrade(src, dst).manifest.format_version == 2


@pytest.fixture
def rangeless() -> Iterator[str]:
    """The LMDB backend, registered again as one that cannot locate records (as a plugin may)."""
    BACKENDS.register("rangeless", dataclasses.replace(get_backend("lmdb"), name="rangeless", ranges=None))
    yield "rangeless"
    BACKENDS.unregister("rangeless")


def test_a_backend_that_cannot_locate_records_still_compares_bytes(tmp_path: Path, rangeless: str) -> None:
    src, dst = make_source(tmp_path / "src", count=3), tmp_path / "dst"
    convert_like_0_1(src, dst, rangeless)
    _same_size_other_bytes(src)
    with pytest.raises(SourceChangedError, match=r"bee/001\.jpg \(changed\)"):
        packer.upgrade(src, dst)
    make_source(tmp_path / "src", count=3)  # as it was
    result = packer.upgrade(src, dst)
    assert result.bytes_compared and "records" not in result.manifest.sample_index
    assert samples_of(dst)[0][0] == (src / "ant" / "000.jpg").read_bytes()
