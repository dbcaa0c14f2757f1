"""Archives as sources: a .tar, .tar.gz, .zip or tar of per-class tars converts exactly as the
tree extracting it would, damage is reported without losing what precedes it, and resume,
update and dry runs work as for a folder. A .tar.gz, a zip and a tar of class tars against the
tree, with spawned workers, are the source contract's (tests/test_contracts.py)."""

from __future__ import annotations

import gzip
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from imagetools import dataset_snapshot, html_as_jpeg, jpeg_bytes, png_bytes, standard_spec, write_tree
from sourcekinds import (
    add_member,
    flip_bytes,
    member_offset,
    truncate,
    write_tar,
    write_tar_of_tars,
    write_zip,
    zip_data_offset,
)

import packer
from packer.errors import BadImageError, EmptySourceError, SourceError
from packer.format.backends import Backend
from packer.source.archive import spool as spool_module
from packer.source.archive.layout import imagefolder_order
from packer.source.archive.source import ArchiveSource
from packer.source.archive.spool import SPOOL_ENV, ensure_spool, spool_path
from packer.source.base import SourceOptions
from packer.source.imagefolder import scan_imagefolder

SHARD_SIZE = "3KB"


@pytest.fixture(autouse=True)
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Decompressed copies of .tar.gz archives go under the test's own folder."""
    folder = tmp_path / "spool"
    monkeypatch.setenv(SPOOL_ENV, str(folder))
    return folder


def rich_tree(root: Path) -> Path:
    """The standard tree plus hidden entries, a file at the root and a broken image."""
    spec = standard_spec()
    spec.update({".DS_Store": b"x", "README.txt": b"read me\n", "cat/broken.jpg": html_as_jpeg(),
                 "cat/.ipynb_checkpoints/001-checkpoint.jpg": jpeg_bytes(8, 8, 1), "dog/._a.JPG": b"apple"})
    return write_tree(root, spec)


#: Archives beside the source contract's (tests/test_contracts.py: a .tar.gz, a zip under a top
#: folder and a tar of class tars, each converted, in spawned workers too, to its tree's dataset):
#: a plain tar, a zip with a stored member, top folders, of the tree with hidden and root files.
ARCHIVES: dict[str, Callable[[Path, Path], Path]] = {
    "tar": lambda src, at: write_tar(src, at / "data.tar"),
    "tar-top-folder": lambda src, at: write_tar(src, at / "data.tar", top="train"),
    "tgz-top-folder": lambda src, at: write_tar(src, at / "data.tgz", top="imagenette2", compress=True),
    "zip": lambda src, at: write_zip(src, at / "data.zip", store=["cat/001.jpg"]),
}


def assert_same_dataset(got: Path, want: Path, *, report: bool = True) -> None:
    """Same shard files (names are content hashes), samples, classes and skipped files."""
    mine, theirs = packer.open_dataset(got, decode=False), packer.open_dataset(want, decode=False)
    assert [(s.path, s.sha256, s.num_samples) for s in mine.manifest.shards] == \
           [(s.path, s.sha256, s.num_samples) for s in theirs.manifest.shards]
    assert mine.classes == theirs.classes
    assert list(mine.samples) == list(theirs.samples)
    assert [(s.path, s.reason) for s in mine.manifest.skipped] == \
           [(s.path, s.reason) for s in theirs.manifest.skipped]
    if report:
        a, b = mine.manifest.scan, theirs.manifest.scan
        assert (sorted(a.ignored_hidden), a.other_files, a.root_files) == \
               (sorted(b.ignored_hidden), b.other_files, b.root_files)


@pytest.mark.parametrize("kind", sorted(ARCHIVES))
def test_an_archive_converts_like_the_tree_extracting_it(tmp_path: Path, any_backend: Backend,
                                                         kind: str) -> None:
    src = rich_tree(tmp_path / "src")
    archive = ARCHIVES[kind](src, tmp_path)
    packer.convert(src, tmp_path / "tree", to=any_backend.name, shard_size=SHARD_SIZE)
    result = packer.convert(archive, tmp_path / "arch", to=any_backend.name, shard_size=SHARD_SIZE)
    assert_same_dataset(tmp_path / "arch", tmp_path / "tree")
    assert len(result.manifest.shards) > 1
    assert result.manifest.extra["source"]["kind"] == "archive"
    assert result.manifest.skipped[0].reason == "not_an_image"
    if "top-folder" in kind:
        notes = result.manifest.extra["source"]["report"]["notes"]
        assert any("taken as the tree's root" in note for note in notes)


NAMES = ["a b/1.jpg", "a-b/1.jpg", "a/x/1.jpg", "a/x/y/2.PNG", "a0/1.jpg", "A/1.jpg", "Z.jpg", "a.jpg",
         "ü/ñ 1.png", "b.JPEG", "a/1.Png", "a/é.webp"]


def test_imagefolder_order_is_scan_imagefolders_order(tmp_path: Path) -> None:
    spec = {f"{cls}/{name}": b"" for cls in ("c", "c b", "c-b", "C", "é") for name in NAMES}
    root = write_tree(tmp_path / "tree", spec)
    want = [item.relpath for item in scan_imagefolder(root).items]
    shuffled = list(spec)
    random.Random(0).shuffle(shuffled)
    assert imagefolder_order(shuffled) == want
    archive = write_tar(root, tmp_path / "t.tar")
    assert [i.relpath for i in ArchiveSource(str(archive), SourceOptions()).scan().items] == want


_SEGMENT = st.text(alphabet="aAb0 -._é", min_size=1, max_size=3).filter(lambda s: s not in (".", "..")
                                                                         and not s.startswith("."))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(paths=st.lists(st.lists(_SEGMENT, min_size=1, max_size=3), min_size=1, max_size=12))
def test_imagefolder_order_matches_a_real_tree(tmp_path_factory: pytest.TempPathFactory,
                                               paths: list[list[str]]) -> None:
    files = {"/".join(["cls", *parts[:-1], parts[-1] + ".jpg"]) for parts in paths}
    folders = {"/".join(f.split("/")[:i]) for f in files for i in range(1, f.count("/") + 1)}
    files -= folders  # a name cannot be a file and a folder at once
    root = write_tree(tmp_path_factory.mktemp("tree"), dict.fromkeys(files, b""))
    assert imagefolder_order(sorted(files, reverse=True)) == [i.relpath for i in scan_imagefolder(root).items]


def test_a_list_file_reads_its_root_archive_like_the_extracted_root(tmp_path: Path) -> None:
    src = rich_tree(tmp_path / "src")
    listed = tmp_path / "val.txt"
    listed.write_text("dog/c.jpeg 1\ncat/001.jpg 0\nzebra fish/with space.png 2\nnot/there.jpg 0\n"
                      "cat/broken.jpg 0\n")
    packer.convert(listed, tmp_path / "tree", to="lmdb", root=src)
    for name, archive in (("tar", write_tar(src, tmp_path / "val.tar")),
                          ("zip", write_zip(src, tmp_path / "val.zip")),
                          ("tgz", write_tar(src, tmp_path / "val.tgz", compress=True))):
        result = packer.convert(listed, tmp_path / name, to="lmdb", root=archive)
        assert_same_dataset(tmp_path / name, tmp_path / "tree", report=False)
        assert {(s.path, s.reason) for s in result.manifest.skipped} == \
               {("not/there.jpg", "missing"), ("cat/broken.jpg", "not_an_image")}


def damage_tree(root: Path) -> Path:
    """Two classes of PNGs (a damaged PNG fails to decode), plus one file that is no image."""
    spec: dict[str, bytes] = {f"{cls}/{i:02d}.png": png_bytes(24, 24, 10 * c + i)
                              for c, cls in enumerate("ab") for i in range(6)}
    spec["a/fake.jpg"] = html_as_jpeg()
    return write_tree(root, spec)


def _outcome(dst: Path) -> tuple[list[str], dict[str, str], list[str]]:
    manifest = packer.open_dataset(dst).manifest
    packed = [path for path, _ in packer.open_dataset(dst).samples]
    notes = manifest.extra["source"]["report"].get("notes", [])
    return packed, {s.path: s.reason for s in manifest.skipped}, notes


ORDER = [f"a/{i:02d}.png" for i in range(6)] + ["a/fake.jpg"] + [f"b/{i:02d}.png" for i in range(6)]


@pytest.mark.parametrize("where", ["middle", "tail"])
def test_a_truncated_tar_keeps_every_member_before_the_cut(tmp_path: Path, where: str) -> None:
    archive = write_tar(damage_tree(tmp_path / "src"), tmp_path / "cut.tar")
    victim = "b/03.png" if where == "middle" else "b/05.png"
    offset, size = member_offset(archive, victim)
    truncate(archive, offset + size // 2)
    packed, skipped, notes = _outcome(_convert(archive, tmp_path / "dst"))
    before = ORDER[:ORDER.index(victim)]
    assert packed == [p for p in before if p != "a/fake.jpg"]
    assert skipped == {"a/fake.jpg": "not_an_image", victim: "truncated"}
    assert any("cut short" in note and victim in note for note in notes)


def _convert(src: Path, dst: Path, **options: object) -> Path:
    packer.convert(src, dst, to="lmdb", shard_size=SHARD_SIZE, **options)  # type: ignore[arg-type]
    return dst


def test_a_truncated_tar_gz_keeps_every_member_before_the_cut(tmp_path: Path) -> None:
    archive = write_tar(damage_tree(tmp_path / "src"), tmp_path / "cut.tar.gz", compress=True)
    truncate(archive, int(archive.stat().st_size * 0.6))
    packed, skipped, notes = _outcome(_convert(archive, tmp_path / "dst"))
    cut = [path for path, reason in skipped.items() if reason in ("truncated", "corrupt_member")]
    assert len(cut) == 1 and notes
    seen = [p for p in ORDER if p in packed or p in skipped]
    assert seen == ORDER[:len(seen)] and cut[0] == seen[-1]  # a prefix, ending with the cut member
    assert 4 <= len(packed) < len(ORDER) - 1


def test_a_truncated_zip_is_read_from_its_local_headers(tmp_path: Path) -> None:
    archive = write_zip(damage_tree(tmp_path / "src"), tmp_path / "cut.zip")
    offset, stored = zip_data_offset(archive, "b/03.png")
    truncate(archive, offset + stored // 2)
    packed, skipped, notes = _outcome(_convert(archive, tmp_path / "dst"))
    assert packed == [p for p in ORDER[:ORDER.index("b/03.png")] if p != "a/fake.jpg"]
    assert skipped == {"a/fake.jpg": "not_an_image", "b/03.png": "truncated"}
    assert any("no central directory" in note for note in notes)


def test_damaged_members_are_skipped_with_their_reasons_and_nothing_else_is_lost(tmp_path: Path) -> None:
    src = damage_tree(tmp_path / "src")
    tar = write_tar(src, tmp_path / "bad.tar")
    offset, size = member_offset(tar, "a/02.png")
    flip_bytes(tar, offset + size // 2)
    packed, skipped, _ = _outcome(_convert(tar, tmp_path / "tar"))
    assert skipped == {"a/02.png": "decode_error", "a/fake.jpg": "not_an_image"}
    assert len(packed) + len(skipped) == len(ORDER)

    zipped = write_zip(src, tmp_path / "bad.zip", store=["b/01.png"])
    for name in ("a/02.png", "b/01.png"):  # deflated: the stream breaks; stored: the CRC-32 fails
        offset, stored = zip_data_offset(zipped, name)
        flip_bytes(zipped, offset + stored // 2)
    packed, skipped, _ = _outcome(_convert(zipped, tmp_path / "zip"))
    assert skipped == {"a/02.png": "corrupt_member", "b/01.png": "corrupt_member",
                       "a/fake.jpg": "not_an_image"}
    assert len(packed) + len(skipped) == len(ORDER)
    details = {s.path: s.detail for s in packer.open_dataset(tmp_path / "zip").manifest.skipped}
    assert "CRC-32" in details["b/01.png"]


@pytest.mark.parametrize("name", ["random.tar", "random.zip", "random.tar.gz", "empty.tar"])
def test_a_file_that_is_no_archive_is_one_error_before_anything_is_written(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"" if name == "empty.tar" else random.Random(1).randbytes(4096))
    with pytest.raises(SourceError, match=name.replace(".", r"\.")) as caught:
        packer.convert(path, tmp_path / "dst", to="lmdb")
    assert "not a valid" in str(caught.value)
    assert not (tmp_path / "dst").exists()


def test_an_archive_without_classes_or_with_an_empty_class_is_refused(tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "flat.tar", "w") as tar:
        add_member(tar, "x.jpg", jpeg_bytes())
        add_member(tar, "docs/readme.txt", b"hi")
    with pytest.raises(EmptySourceError, match="'docs'"):
        packer.convert(tmp_path / "flat.tar", tmp_path / "dst", to="lmdb")
    assert not (tmp_path / "dst").exists()
    plan = packer.plan_conversion(tmp_path / "flat.tar", to="lmdb")
    assert plan.empty_classes == ("docs",) and plan.report.root_files == 1


def test_strict_names_the_member_inside_the_archive(tmp_path: Path) -> None:
    archive = write_tar(damage_tree(tmp_path / "src"), tmp_path / "archive.tar")
    with pytest.raises(BadImageError, match=r"archive\.tar:a/fake\.jpg"):
        packer.convert(archive, tmp_path / "dst", to="lmdb", strict=True)


def test_links_and_special_members_are_not_followed_but_listed(tmp_path: Path) -> None:
    image = png_bytes(9, 9, 3)
    with tarfile.open(tmp_path / "links.tar", "w") as tar:
        add_member(tar, "a/00.png", image)
        for name, kind, target in (("a/hard.png", tarfile.LNKTYPE, "a/00.png"),
                                   ("a/soft.png", tarfile.SYMTYPE, "00.png"),
                                   ("a/fifo.png", tarfile.FIFOTYPE, ""),
                                   ("a/folder.png", tarfile.DIRTYPE, "")):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            tar.addfile(info)
    result = packer.convert(tmp_path / "links.tar", tmp_path / "dst", to="lmdb")
    dataset = packer.open_dataset(tmp_path / "dst", decode=False)
    assert [(path, dataset[i][0]) for i, (path, _) in enumerate(dataset.samples)] == \
           [("a/00.png", image), ("a/hard.png", image)]
    assert {(s.path, s.reason) for s in result.manifest.skipped} == \
           {("a/soft.png", "not_a_regular_file"), ("a/fifo.png", "not_a_regular_file")}


def test_an_unsupported_zip_compression_is_one_error(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "lzma.zip", "w", compression=zipfile.ZIP_LZMA) as archive:
        archive.writestr("a/00.png", png_bytes())
    with pytest.raises(SourceError, match="compression method 14"):
        packer.convert(tmp_path / "lzma.zip", tmp_path / "dst", to="lmdb")
    assert not (tmp_path / "dst").exists()


def test_a_dry_run_plans_an_archive_as_its_tree(tmp_path: Path) -> None:
    src = rich_tree(tmp_path / "src")
    for archive in (write_tar(src, tmp_path / "d.tar"), write_zip(src, tmp_path / "d.zip")):
        plan = packer.plan_conversion(archive, to="lmdb", shard_size=SHARD_SIZE)
        tree = packer.plan_conversion(src, to="lmdb", shard_size=SHARD_SIZE)
        assert (plan.classes, plan.class_counts, plan.num_images, plan.shards) == \
               (tree.classes, tree.class_counts, tree.num_images, tree.shards)
        assert plan.source_bytes == tree.source_bytes


def test_an_archive_that_changes_under_the_reader_is_refused(tmp_path: Path) -> None:
    archive = write_tar(damage_tree(tmp_path / "src"), tmp_path / "a.tar")
    source = ArchiveSource(str(archive), SourceOptions())
    item = source.scan().items[0]
    reader = source.reader()
    os.utime(archive, ns=(0, 1_000_000_000))
    with pytest.raises(SourceError, match="changed during the conversion"):
        reader.read(item)


def test_a_spool_is_made_once_reused_and_removed(tmp_path: Path, spool: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan decompresses a .tar.gz once, for its index and its spool together: the reader
    never decompresses it again."""
    archive = write_tar(damage_tree(tmp_path / "src"), tmp_path / "a.tgz", compress=True)
    decompressions: list[str] = []
    decompress = spool_module._decompress
    monkeypatch.setattr(spool_module, "_decompress", lambda *args: decompressions.append(args[0]))
    with ArchiveSource(str(archive), SourceOptions()) as source:
        index = source.scan()
        stat = archive.stat()
        made = spool_path(str(archive), stat.st_size, stat.st_mtime_ns)
        assert Path(made).read_bytes() == gzip.decompress(archive.read_bytes())  # written by the scan
        reader = source.reader()
        assert reader.read(index.items[0]) == (tmp_path / "src" / index.items[0].relpath).read_bytes()
        assert ensure_spool(str(archive), stat.st_size, stat.st_mtime_ns) == made and not decompressions
    assert not os.path.exists(made)  # close() removed it
    monkeypatch.setattr(spool_module, "_decompress", decompress)  # a spool nobody's scan made
    ensure_spool(str(archive), stat.st_size, stat.st_mtime_ns)
    os.utime(archive, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a new version of the archive
    newer = ensure_spool(str(archive), stat.st_size, stat.st_mtime_ns + 10**9)
    assert [p.name for p in spool.glob("*.tar")] == [os.path.basename(newer)]  # the old one is gone


def update_tree(root: Path) -> Path:
    return write_tree(root, {f"{cls}/{i:03d}.jpg": jpeg_bytes(14 + i % 9, 12 + i % 7, 100 * c + i)
                             for c, cls in enumerate(("ant", "bee", "cow")) for i in range(14)})


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_update_of_an_archive_with_members_added_rewrites_only_nearby_shards(tmp_path: Path,
                                                                              kind: str) -> None:
    write = ARCHIVES[kind]
    archive = write(update_tree(tmp_path / "old"), tmp_path)
    dst = _convert(archive, tmp_path / "dst", workers=1)
    archive.unlink()
    write(write_tree(tmp_path / "old", {f"bee/new{i}.jpg": jpeg_bytes(20, 17, 900 + i) for i in range(3)}),
          tmp_path)  # the same files (and times), three more
    result = packer.update(archive, dst, workers=1)
    assert result.files_added == 3 and result.files_removed == result.files_changed == 0
    assert 1 <= result.shards_written <= 3 and result.shards_reused >= 5
    fresh = _convert(archive, tmp_path / "fresh", workers=1)
    packer.collect_garbage(dst)
    assert dataset_snapshot(dst) == dataset_snapshot(fresh)


_KILLED_MID_RUN = """
import os, signal, sys
import packer.conversion.engines.local as engines
run = engines.run_shard_tasks
def patched(tasks, *, workers, on_progress, on_result):
    seen = []
    def result(r):
        follow_ups = on_result(r)
        seen.append(r)
        if len(seen) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return follow_ups
    return run(tasks, workers=workers, on_progress=on_progress, on_result=result)
engines.run_shard_tasks = patched
from packer.cli import main
sys.argv = ["packer", "convert", *sys.argv[1:]]
main()
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["r.tar", "r.tgz"])
def test_an_interrupted_conversion_of_an_archive_resumes(tmp_path: Path, name: str) -> None:
    archive = write_tar(update_tree(tmp_path / "src"), tmp_path / name, compress=name.endswith(".tgz"))
    clean = _convert(archive, tmp_path / "clean", workers=2)
    dst = tmp_path / "dst"
    killed = subprocess.run([sys.executable, "-c", _KILLED_MID_RUN, str(archive), str(dst), "--to", "lmdb",
                             "--shard-size", SHARD_SIZE, "-q", "--workers", "2"],
                            capture_output=True, text=True, timeout=240, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (dst / "index.json").exists()
    resumed = packer.convert(archive, dst, to="lmdb", shard_size=SHARD_SIZE, resume=True, workers=2)
    assert resumed.resumed_shards >= 2
    assert dataset_snapshot(dst) == dataset_snapshot(clean)


@pytest.mark.parametrize("compressed", [False, True])
def test_a_truncated_tar_of_class_tars_keeps_every_image_before_the_cut(tmp_path: Path,
                                                                         compressed: bool) -> None:
    archive = write_tar_of_tars(damage_tree(tmp_path / "src"), tmp_path / "train.tar")
    outer, _ = member_offset(archive, "b.tar")
    with tarfile.open(archive) as tar, tar.extractfile("b.tar") as inner_file:  # type: ignore[union-attr]
        with tarfile.open(fileobj=inner_file) as inner:
            info = inner.getmember("03.png")
            inner_offset, size = info.offset_data, info.size
    truncate(archive, outer + inner_offset + size // 2)
    if compressed:  # a whole gzip stream of the cut tar: read as a stream, it ends early too
        with open(archive, "rb") as plain, gzip.open(tmp_path / "train.tgz", "wb") as packed_file:
            shutil.copyfileobj(plain, packed_file)
        archive = tmp_path / "train.tgz"
    packed, skipped, notes = _outcome(_convert(archive, tmp_path / "dst"))
    assert packed == [p for p in ORDER[:ORDER.index("b/03.png")] if p != "a/fake.jpg"]
    assert skipped == {"a/fake.jpg": "not_an_image", "b/03.png": "truncated"}
    assert any("'b.tar'" in note and "cut short" in note for note in notes)
    if compressed:
        return
    truncate(archive, outer + 100)  # class b's archive now ends inside its first header
    with pytest.raises(EmptySourceError, match=r"'b'.*b\.tar cannot be read"):
        packer.convert(archive, tmp_path / "again", to="lmdb")


def test_macos_zip_extras_are_ignored_and_reported(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "mac.zip", "w") as archive:
        archive.writestr("photos/", b"")
        archive.writestr("photos/cat/1.png", png_bytes())
        archive.writestr("__MACOSX/photos/cat/._1.png", b"apple double")
        archive.writestr("photos/.DS_Store", b"x")
    plan = packer.plan_conversion(tmp_path / "mac.zip", to="lmdb")
    assert plan.classes == ("cat",) and plan.num_images == 1
    assert set(plan.report.ignored_hidden) == {"__MACOSX", ".DS_Store"}
