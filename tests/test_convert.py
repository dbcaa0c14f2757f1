"""Conversion end to end: pixels, skipped files, DST rules, determinism.

What a backend writes (its manifest entry and shard names, empty shards) is checked for every
backend; the rest (skip reasons, DST rules, options, determinism, damage found on opening) does
not depend on the backend and runs once (``any_backend``); ``BackendContract`` checks each
backend's bytes, resume and verify (tests/test_contracts.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from imagetools import (
    DROP_DAC_PRELUDE,
    STANDARD_IMAGES,
    Symlink,
    corrupt_png,
    html_as_jpeg,
    jpeg_bytes,
    png_bytes,
    rgb_of,
    sha,
    standard_spec,
    tree_files,
    truncated_jpeg,
    truncated_png,
    write_tree,
    zoo,
)

import packer
from packer import (
    BadImageError,
    EmptySourceError,
    IncompleteDatasetError,
    OutputError,
    OutputExistsError,
    ShardError,
    SourceError,
    UnknownNameError,
    convert,
    open_dataset,
    scan_imagefolder,
)
from packer.conversion.engines import local as workers
from packer.conversion.sharding import plan_shards
from packer.format.backends import Backend
from packer.format.manifest import IN_PROGRESS_NAME, MANIFEST_NAME, Manifest
from packer.source.sourcefile import SKIP_REASONS


def dataset_files(dst: Path) -> set[str]:
    """Every file a finished dataset should hold, from its manifest."""
    manifest = Manifest.load(dst)
    return ({MANIFEST_NAME, f"versions/{manifest.version:05d}.json"} | {s.path for s in manifest.shards}
            | {f.path for f in manifest.sample_index.values()})


# ----------------------------------------------------------------------------- pixels and bytes


def test_odd_images_convert_with_imagefolder_pixels(make_tree: Any, tmp_path: Path,
                                                     any_backend: Backend) -> None:
    spec = {f"odd/{name}": data for name, data in zoo().items()}
    spec["plain/rgb.jpg"] = jpeg_bytes(16, 12, 3)
    src = make_tree(spec)
    result = convert(src, tmp_path / "dst", to=any_backend.name)

    assert result.manifest.skipped == ()
    assert result.found == len(spec) == result.manifest.num_samples
    ds = open_dataset(tmp_path / "dst")
    assert len(ds) == len(spec)
    for i, (relpath, _) in enumerate(ds.samples):
        image, _ = ds[i]
        assert image.mode == "RGB"
        assert np.array_equal(np.asarray(image), rgb_of(src / relpath)), relpath
    # EXIF orientation 6 is not applied, exactly as ImageFolder
    exif_index = [p for p, _ in ds.samples].index("odd/exif6.jpg")
    assert ds[exif_index][0].size == (24, 16)

    raw = open_dataset(tmp_path / "dst", decode=False)
    for i, (relpath, _) in enumerate(raw.samples):
        data, _ = raw[i]
        assert type(data) is bytes
        assert data == (src / relpath).read_bytes(), relpath
    assert result.bytes_in == sum(len(d) for d in spec.values())


def test_manifest_describes_the_conversion(standard_tree: Path, tmp_path: Path,
                                           backend: Backend) -> None:
    result = convert(standard_tree, tmp_path / "dst", to=backend.name)
    manifest = Manifest.load(tmp_path / "dst")
    assert manifest == result.manifest
    assert manifest.backend == backend.name
    assert manifest.codec == "original" and manifest.codec_params == {"exif_transpose": False}
    assert manifest.check == "full"
    assert manifest.classes == ("cat", "dog", "zebra fish", "éclair")
    assert manifest.class_counts == (4, 4, 3, 3)
    assert manifest.num_samples == STANDARD_IMAGES
    assert manifest.source == str(standard_tree)
    assert manifest.created_by.startswith("packer ")
    assert manifest.scan.filter == "extensions" and manifest.scan.other_files == 1
    assert manifest.scan.symlink_loops == "walked_once"
    [shard] = manifest.shards
    assert re.fullmatch(rf"shard-[0-9a-f]{{16}}{re.escape(backend.suffix)}", shard.path)
    assert shard.path == f"shard-{shard.sha256[:16]}{backend.suffix}"  # named by its contents
    assert sorted(os.listdir(tmp_path / "dst")) == sorted(
        [MANIFEST_NAME, shard.path, "samples", "versions"])  # no marker, no staging
    assert manifest.version == 1 and manifest.last_update == {}
    assert dataset_files(tmp_path / "dst") == set(tree_files(tmp_path / "dst"))
    for entry in [*manifest.shards, *manifest.sample_index.values()]:
        data = (tmp_path / "dst" / entry.path).read_bytes()
        assert (len(data), manifest.digest_algorithm.hex(data)) == (entry.num_bytes, entry.sha256)


# ----------------------------------------------------------------------------- skipped files


def broken_spec() -> dict[str, Any]:
    return {
        "a_good/first.jpg": jpeg_bytes(16, 12, 1),
        "bad/bomb.png": png_bytes(40, 40, 2),          # 1600 pixels > max_pixels below
        "bad/corrupt.png": corrupt_png(),
        "bad/dangling.jpg": Symlink("missing.jpg"),
        "bad/empty.jpg": b"",
        "bad/fine.png": png_bytes(10, 10, 3),
        "bad/html.jpg": html_as_jpeg(),
        "bad/selfloop.jpg": Symlink("selfloop.jpg"),
        "bad/truncated.jpg": truncated_jpeg(),
        "bad/truncated66.png": truncated_png(),
        "z_good/last.png": png_bytes(8, 8, 4),
    }


EXPECTED_SKIPS = {
    "bad/bomb.png": "decompression_bomb",
    "bad/corrupt.png": "decode_error",
    "bad/dangling.jpg": "broken_symlink",
    "bad/empty.jpg": "empty_file",
    "bad/fifo.jpg": "not_a_regular_file",
    "bad/html.jpg": "not_an_image",
    "bad/selfloop.jpg": "broken_symlink",
    "bad/truncated.jpg": "truncated",
    "bad/truncated66.png": "truncated",
}


@pytest.fixture
def broken_tree(make_tree: Any) -> Path:
    src = make_tree(broken_spec())
    os.mkfifo(src / "bad" / "fifo.jpg")
    return src


def test_every_broken_kind_is_skipped_with_its_reason(broken_tree: Path, tmp_path: Path,
                                                      any_backend: Backend) -> None:
    result = convert(broken_tree, tmp_path / "dst", to=any_backend.name, max_pixels=1500)
    manifest = result.manifest
    assert {s.path: s.reason for s in manifest.skipped} == EXPECTED_SKIPS
    assert all(s.reason in SKIP_REASONS and s.detail for s in manifest.skipped)
    # skipped entries are in ImageFolder order
    assert [s.path for s in manifest.skipped] == sorted(EXPECTED_SKIPS)
    found = len(scan_imagefolder(broken_tree).items)
    assert result.found == found == 12
    assert manifest.num_samples + len(manifest.skipped) == found
    ds = open_dataset(tmp_path / "dst", decode=False)
    assert ds.samples == [("a_good/first.jpg", 0), ("bad/fine.png", 1), ("z_good/last.png", 2)]
    assert [ds[i][0] for i in range(3)] == [
        (broken_tree / p).read_bytes() for p in ("a_good/first.jpg", "bad/fine.png",
                                                 "z_good/last.png")]
    assert manifest.class_counts == (1, 1, 1)
    assert Manifest.load(tmp_path / "dst").skipped == manifest.skipped


def test_bomb_limit_is_per_conversion(broken_tree: Path, tmp_path: Path, any_backend: Backend) -> None:
    manifest = convert(broken_tree, tmp_path / "dst", to=any_backend.name).manifest
    assert "bad/bomb.png" not in {s.path for s in manifest.skipped}


@pytest.mark.parametrize(("check", "extra_packed"), [
    ("header", {"bad/corrupt.png", "bad/truncated.jpg", "bad/truncated66.png"}),
    ("none", {"bad/corrupt.png", "bad/truncated.jpg", "bad/truncated66.png", "bad/html.jpg",
              "bad/bomb.png"}),
])
def test_lighter_checks_pack_more(broken_tree: Path, tmp_path: Path, any_backend: Backend,
                                  check: str, extra_packed: set[str]) -> None:
    manifest = convert(broken_tree, tmp_path / "dst", to=any_backend.name, max_pixels=1500,
                       check=check).manifest
    assert {s.path for s in manifest.skipped} == set(EXPECTED_SKIPS) - extra_packed
    assert manifest.check == check


def test_strict_raises_naming_the_file_and_leaves_an_incomplete_dst(
        broken_tree: Path, tmp_path: Path, any_backend: Backend) -> None:
    dst = tmp_path / "dst"
    # One worker: with several, "first" is the first bad file any worker meets.
    with pytest.raises(BadImageError, match="bomb.png") as info:
        convert(broken_tree, dst, to=any_backend.name, strict=True, max_pixels=1500, workers=1)
    assert info.value.path == "bad/bomb.png"
    assert info.value.reason == "decompression_bomb"
    assert isinstance(info.value, SourceError)
    assert "strict=True" in str(info.value)
    assert not (dst / MANIFEST_NAME).exists()
    with pytest.raises(IncompleteDatasetError, match="incomplete"):
        open_dataset(dst)
    # no half-written shard is left where a finished one would be
    assert not list(dst.glob(f"shard-*{any_backend.suffix}"))


def test_strict_on_a_clean_tree_converts(standard_tree: Path, tmp_path: Path,
                                         any_backend: Backend) -> None:
    result = convert(standard_tree, tmp_path / "dst", to=any_backend.name, strict=True)
    assert result.manifest.num_samples == STANDARD_IMAGES


_DROP_DAC = DROP_DAC_PRELUDE + textwrap.dedent("""
    src, dst, backend = sys.argv[1:4]
    import packer, packer.conversion.engines.local
    # Spawned workers exec python afresh, and root regains its capabilities on exec: fork
    # keeps the dropped ones.
    packer.conversion.engines.local.START_METHOD = "fork"
    packer.convert(src, dst, to=backend)
    print("CONVERTED")
""")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_permission_denied_is_skipped(make_tree: Any, tmp_path: Path, any_backend: Backend) -> None:
    """Root reads mode-000 files, so the conversion runs in a child without DAC override.

    The child drops ``CAP_DAC_OVERRIDE`` and ``CAP_DAC_READ_SEARCH`` (root stays the owner of
    the tree it reads, so nothing else changes); the parent checks what it wrote.
    """
    src = make_tree({"cls/a.jpg": jpeg_bytes(8, 8, 1), "cls/secret.jpg": jpeg_bytes(8, 8, 2),
                     "cls/locked/inside.jpg": jpeg_bytes(8, 8, 3),
                     "cls/z.png": png_bytes(8, 8, 4)})
    os.chmod(src / "cls" / "secret.jpg", 0)
    os.chmod(src / "cls" / "locked", 0)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _DROP_DAC, str(src), str(tmp_path / "dst"), any_backend.name],
            env={**os.environ, "PACKER_TEST_PROBE": str(src / "cls" / "secret.jpg")},
            capture_output=True, text=True, timeout=100, check=False)
    finally:
        os.chmod(src / "cls" / "locked", 0o755)
        os.chmod(src / "cls" / "secret.jpg", 0o644)
    if proc.stdout.startswith("SKIP"):
        pytest.skip(f"cannot make file modes bind in a child: {proc.stdout.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert "CONVERTED" in proc.stdout
    manifest = Manifest.load(tmp_path / "dst")
    assert [(s.path, s.reason) for s in manifest.skipped] == [("cls/secret.jpg",
                                                                "permission_denied")]
    assert manifest.scan.unreadable_dirs == ("cls/locked",)
    assert open_dataset(tmp_path / "dst").samples == [("cls/a.jpg", 0), ("cls/z.png", 0)]


# ----------------------------------------------------------------------------- DST rules


def test_non_empty_dst_is_refused_and_untouched(standard_tree: Path, tmp_path: Path,
                                                any_backend: Backend) -> None:
    dst = write_tree(tmp_path / "dst", {"precious.txt": b"keep me", "sub/x.bin": b"\x00" * 10})
    before = tree_files(dst)
    with pytest.raises(OutputExistsError, match="not empty") as info:
        convert(standard_tree, dst, to=any_backend.name)
    assert isinstance(info.value, FileExistsError)
    # A foreign directory is never overwritten, so the message must not suggest overwrite=True.
    assert "choose a new directory" in str(info.value) and "overwrite" not in str(info.value)
    assert tree_files(dst) == before
    assert sorted(os.listdir(dst)) == ["precious.txt", "sub"]


def test_foreign_directory_is_never_deleted_even_with_overwrite(
        standard_tree: Path, tmp_path: Path, any_backend: Backend) -> None:
    dst = write_tree(tmp_path / "dst", {"precious.txt": b"keep me"})
    with pytest.raises(OutputError, match="will not delete"):
        convert(standard_tree, dst, to=any_backend.name, overwrite=True)
    assert tree_files(dst) == {"precious.txt": (7, sha(b"keep me"))}


@pytest.mark.parametrize("index_json", [b'{"pages": ["home"]}', b"[1, 2]", b"not json",
                                        b'{"format": "webpack"}'])
def test_a_foreign_index_json_does_not_make_a_directory_packer_s(
        standard_tree: Path, tmp_path: Path, any_backend: Backend, index_json: bytes) -> None:
    dst = write_tree(tmp_path / "site", {"index.json": index_json, "page.html": b"<html/>"})
    before = tree_files(dst)
    with pytest.raises(OutputExistsError, match="not empty"):
        convert(standard_tree, dst, to=any_backend.name)
    with pytest.raises(OutputError, match="will not delete"):
        convert(standard_tree, dst, to=any_backend.name, overwrite=True)
    assert tree_files(dst) == before


def test_src_inside_dst_is_refused_even_with_overwrite(make_tree: Any, tmp_path: Path,
                                                       any_backend: Backend) -> None:
    dst = tmp_path / "dst"
    convert(make_tree({"x/a.png": png_bytes(8, 8, 1)}, name="first"), dst, to=any_backend.name)
    src = write_tree(dst / "incoming", standard_spec())
    before = tree_files(src)
    with pytest.raises(OutputError, match="inside the destination"):
        convert(src, dst, to=any_backend.name, overwrite=True)
    assert tree_files(src) == before
    assert len(open_dataset(dst)) == 1  # the earlier dataset is untouched too


class _Crash(BaseException):
    """Stands for the process being killed."""


@pytest.mark.parametrize("crash_at", ["index.json", "shard-", "samples"])
def test_a_crash_while_clearing_for_overwrite_leaves_an_incomplete_dst(
        standard_tree: Path, tmp_path: Path, any_backend: Backend, monkeypatch: pytest.MonkeyPatch,
        crash_at: str) -> None:
    dst = tmp_path / "dst"
    convert(standard_tree, dst, to=any_backend.name, shard_size=2000)
    real_unlink, real_rmtree = os.unlink, shutil.rmtree

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if os.path.basename(path).startswith(crash_at):
            raise _Crash(path)
        real_unlink(path, *args, **kwargs)

    def rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
        if os.path.basename(path).startswith(crash_at):
            raise _Crash(path)
        real_rmtree(path, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(os, "unlink", unlink)
        patch.setattr(shutil, "rmtree", rmtree)
        with pytest.raises(_Crash):
            convert(standard_tree, dst, to=any_backend.name, shard_size=2000, overwrite=True)
    if crash_at == "index.json":  # killed before anything was deleted: still the old dataset
        assert len(open_dataset(dst)) == STANDARD_IMAGES
    else:
        with pytest.raises(IncompleteDatasetError, match="incomplete"):
            open_dataset(dst)
    redone = convert(standard_tree, dst, to=any_backend.name, shard_size=2000, overwrite=True)
    assert redone.manifest.num_samples == STANDARD_IMAGES
    assert set(tree_files(dst)) == dataset_files(dst)


def test_existing_dataset_needs_overwrite(standard_tree: Path, tmp_path: Path,
                                          any_backend: Backend) -> None:
    dst = tmp_path / "dst"
    convert(standard_tree, dst, to=any_backend.name)
    before = tree_files(dst)
    with pytest.raises(OutputExistsError, match="a packer dataset"):
        convert(standard_tree, dst, to=any_backend.name)
    assert tree_files(dst) == before


def test_overwrite_replaces_an_earlier_dataset(standard_tree: Path, make_tree: Any,
                                               tmp_path: Path, any_backend: Backend) -> None:
    dst = tmp_path / "dst"
    first = convert(standard_tree, dst, to=any_backend.name, shard_size=2000)
    assert len(first.manifest.shards) >= 3
    other = make_tree({"only/one.png": png_bytes(8, 8, 5)}, name="other")
    second = convert(other, dst, to=any_backend.name, overwrite=True)
    assert second.manifest.classes == ("only",)
    assert set(tree_files(dst)) == dataset_files(dst)  # nothing stale from the first dataset
    ds = open_dataset(dst, decode=False)
    assert ds.samples == [("only/one.png", 0)]
    assert ds[0][0] == (other / "only" / "one.png").read_bytes()


def test_empty_existing_dst_is_fine(standard_tree: Path, tmp_path: Path, any_backend: Backend) -> None:
    (tmp_path / "dst").mkdir()
    assert convert(standard_tree, tmp_path / "dst", to=any_backend.name).manifest.num_samples == 14


@pytest.mark.parametrize("where", ["inside", "same", "deep"])
def test_dst_inside_src_is_refused(standard_tree: Path, any_backend: Backend, where: str) -> None:
    before = tree_files(standard_tree)
    dst = {"inside": standard_tree / "packed", "same": standard_tree,
           "deep": standard_tree / "cat" / "sub" / "packed"}[where]
    with pytest.raises(OutputError, match="inside the source"):
        convert(standard_tree, dst, to=any_backend.name)
    assert tree_files(standard_tree) == before
    assert not (standard_tree / "packed").exists()


def test_dst_that_is_a_file_is_refused(standard_tree: Path, tmp_path: Path,
                                       any_backend: Backend) -> None:
    (tmp_path / "dst").write_text("x")
    with pytest.raises(OutputError, match="not a directory"):
        convert(standard_tree, tmp_path / "dst", to=any_backend.name)
    assert (tmp_path / "dst").read_text() == "x"


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"to": "zarr"}, UnknownNameError, "hdf5, lmdb"),
    ({"codec": "webp"}, UnknownNameError, "original"),
    ({"check": "thorough"}, ValueError, "check must be one of"),
    ({"max_pixels": 0}, ValueError, "max_pixels"),
    ({"shard_size": "huge"}, ValueError, "invalid size"),
    ({"shard_size": 0}, ValueError, "invalid size"),
])
def test_bad_options_fail_before_touching_dst(standard_tree: Path, tmp_path: Path,
                                              any_backend: Backend, options: dict[str, Any],
                                              error: type[Exception], match: str) -> None:
    kwargs: dict[str, Any] = {"to": any_backend.name, **options}
    with pytest.raises(error, match=match):
        convert(standard_tree, tmp_path / "dst", **kwargs)
    assert not (tmp_path / "dst").exists()


def test_source_errors_leave_no_dst(tmp_path: Path, make_tree: Any, any_backend: Backend) -> None:
    with pytest.raises(packer.SourceNotFoundError):
        convert(tmp_path / "missing", tmp_path / "dst", to=any_backend.name)
    src = make_tree({"a/1.jpg": jpeg_bytes(), "empty/readme.txt": b"hi"})
    with pytest.raises(packer.EmptySourceError, match="'empty'"):
        convert(src, tmp_path / "dst", to=any_backend.name)
    assert not (tmp_path / "dst").exists()
    result = convert(src, tmp_path / "dst", to=any_backend.name, allow_empty=True)
    assert result.manifest.classes == ("a", "empty")
    assert result.manifest.class_counts == (1, 0)


# ----------------------------------------------------------------------------- determinism, shards


def test_same_tree_twice_gives_identical_datasets(standard_tree: Path, tmp_path: Path,
                                                  any_backend: Backend) -> None:
    one = convert(standard_tree, tmp_path / "one", to=any_backend.name, shard_size=3000).manifest
    two = convert(standard_tree, tmp_path / "two", to=any_backend.name, shard_size=3000).manifest
    assert len(one.shards) >= 2
    assert [s.sha256 for s in one.shards] == [s.sha256 for s in two.shards]
    assert tree_files(tmp_path / "one").keys() == tree_files(tmp_path / "two").keys()
    for rel, (size, digest) in tree_files(tmp_path / "one").items():
        if rel != MANIFEST_NAME and not rel.startswith("versions/"):  # created_at differs
            assert tree_files(tmp_path / "two")[rel] == (size, digest), rel
    first = json.loads((tmp_path / "one" / MANIFEST_NAME).read_text())
    second = json.loads((tmp_path / "two" / MANIFEST_NAME).read_text())
    first.pop("created_at")
    second.pop("created_at")
    assert first == second
    assert one.sample_index == two.sample_index


def test_small_shard_size_splits_contiguously(standard_tree: Path, tmp_path: Path,
                                              any_backend: Backend) -> None:
    dst = tmp_path / "dst"
    manifest = convert(standard_tree, dst, to=any_backend.name, shard_size="2kB").manifest
    index = scan_imagefolder(standard_tree)
    plans = plan_shards([item.size for item in index.items], [item.relpath for item in index.items], 2000)
    assert len(manifest.shards) == len(plans) >= 3
    first = 0
    for shard, plan in zip(manifest.shards, plans, strict=True):
        assert shard.path == f"shard-{shard.sha256[:16]}{any_backend.suffix}"
        assert shard.first == first == plan.start
        assert shard.num_samples == plan.num_items
        first += shard.num_samples
    assert first == manifest.num_samples == len(index.items)
    assert manifest.extra["shard_size"] == 2000

    ds = open_dataset(dst, decode=False)
    assert [p for p, _ in ds.samples] == [item.relpath for item in index.items]
    expected = [(standard_tree / item.relpath).read_bytes() for item in index.items]
    assert [ds[i][0] for i in range(len(ds))] == expected
    boundaries = [s.first for s in manifest.shards[1:]]
    across = [i for b in boundaries for i in (b - 1, b)] + [len(ds) - 1, 0]
    assert [s for s, _ in ds.__getitems__(across)] == [expected[i] for i in across]


def test_an_empty_shard_reads_correctly(make_tree: Any, tmp_path: Path, backend: Backend) -> None:
    src = make_tree({
        "a/0_bad.jpg": truncated_jpeg(), "a/1.jpg": jpeg_bytes(8, 8, 1),
        "a/2_bad.png": b"", "a/3_bad.png": truncated_png(), "b/4.jpg": jpeg_bytes(8, 8, 2),
        "b/5_bad.png": corrupt_png()})
    manifest = convert(src, tmp_path / "dst", to=backend.name, shard_size=1).manifest
    assert [s.num_samples for s in manifest.shards] == [0, 1, 0, 0, 1, 0]
    assert [s.first for s in manifest.shards] == [0, 0, 1, 1, 1, 2]
    ds = open_dataset(tmp_path / "dst", decode=False)
    assert len(ds) == 2
    assert ds.samples == [("a/1.jpg", 0), ("b/4.jpg", 1)]
    assert ds[0][0] == (src / "a/1.jpg").read_bytes()
    assert ds[1][0] == ds[-1][0] == (src / "b/4.jpg").read_bytes()
    assert ds.__getitems__([1, 0, 1]) == [ds[1], ds[0], ds[1]]
    with pytest.raises(IndexError):
        ds[2]


def test_a_tree_of_only_bad_files_stops_and_writes_no_dataset(make_tree: Any, tmp_path: Path,
                                                              any_backend: Backend) -> None:
    src = make_tree({"a/bad.jpg": truncated_jpeg(), "b/bad.png": b""})
    with pytest.raises(EmptySourceError, match=r"every one of the 2 images .* is skipped \(empty_file 1, "):
        convert(src, tmp_path / "dst", to=any_backend.name)
    assert not (tmp_path / "dst" / "index.json").exists()
    with pytest.raises(IncompleteDatasetError):
        open_dataset(tmp_path / "dst")


def test_hidden_files_and_is_valid_file_pass_through(make_tree: Any, tmp_path: Path,
                                                     any_backend: Backend) -> None:
    src = make_tree({"c/a.jpg": jpeg_bytes(8, 8, 1), "c/._a.jpg": jpeg_bytes(8, 8, 2),
                     "c/.ipynb_checkpoints/a-checkpoint.jpg": jpeg_bytes(8, 8, 3),
                     "c/b.image": png_bytes(8, 8, 4)})
    default = convert(src, tmp_path / "d1", to=any_backend.name).manifest
    assert default.num_samples == 1
    assert sorted(default.scan.ignored_hidden) == ["c/._a.jpg", "c/.ipynb_checkpoints"]
    assert default.scan.include_hidden is False
    hidden = convert(src, tmp_path / "d2", to=any_backend.name, include_hidden=True).manifest
    assert hidden.num_samples == 3 and hidden.scan.include_hidden is True
    assert open_dataset(tmp_path / "d2").samples == [
        ("c/._a.jpg", 0), ("c/a.jpg", 0), ("c/.ipynb_checkpoints/a-checkpoint.jpg", 0)]
    custom = convert(src, tmp_path / "d3", to=any_backend.name,
                     is_valid_file=lambda p: p.endswith(".image")).manifest
    assert custom.scan.filter == "is_valid_file" and custom.scan.extensions == ()
    assert open_dataset(tmp_path / "d3").samples == [("c/b.image", 0)]


# ----------------------------------------------------------------------------- crashes, damage


def _fail_after(monkeypatch: pytest.MonkeyPatch, backend: Backend, writes: int) -> None:
    original = backend.writer.write
    calls = {"n": 0}

    def write(self: Any, payload: bytes) -> None:
        calls["n"] += 1
        if calls["n"] > writes:
            raise OSError(28, "No space left on device (simulated)")
        original(self, payload)

    monkeypatch.setattr(backend.writer, "write", write)


def test_interrupted_conversion_is_incomplete_and_can_be_redone(
        standard_tree: Path, tmp_path: Path, any_backend: Backend,
        monkeypatch: pytest.MonkeyPatch) -> None:
    dst = tmp_path / "dst"
    with monkeypatch.context() as patch:
        patch.setattr(workers, "START_METHOD", "fork")  # the patched writer reaches the worker
        _fail_after(patch, any_backend, 8)  # a few shards in: some are finished, one is half done
        with pytest.raises(OutputError, match="disk is full.*simulated.*resume=True"):
            convert(standard_tree, dst, to=any_backend.name, shard_size=2000, workers=1)
    assert (dst / IN_PROGRESS_NAME).exists()
    assert list(dst.glob(f"shard-*{any_backend.suffix}"))
    assert not (dst / MANIFEST_NAME).exists()
    with pytest.raises(IncompleteDatasetError, match="incomplete"):
        open_dataset(dst)
    with pytest.raises(IncompleteDatasetError, match="incomplete"):
        Manifest.load(dst)
    with pytest.raises(OutputExistsError, match="interrupted conversion.*resume=True.*overwrite=True"):
        convert(standard_tree, dst, to=any_backend.name, shard_size=2000)

    redone = convert(standard_tree, dst, to=any_backend.name, shard_size=2000, overwrite=True)
    clean = convert(standard_tree, tmp_path / "clean", to=any_backend.name, shard_size=2000)
    assert [s.sha256 for s in redone.manifest.shards] == [s.sha256 for s in clean.manifest.shards]
    assert set(tree_files(dst)) == dataset_files(dst)
    assert len(open_dataset(dst)) == STANDARD_IMAGES


@pytest.mark.parametrize("damage", ["delete_shard", "truncate_shard", "grow_shard",
                                    "delete_index_file"])
def test_damaged_dataset_is_a_shard_error(standard_tree: Path, tmp_path: Path, any_backend: Backend,
                                          damage: str) -> None:
    dst = tmp_path / "dst"
    manifest = convert(standard_tree, dst, to=any_backend.name, shard_size=3000).manifest
    shard = dst / manifest.shards[1].path
    if damage == "delete_shard":
        shard.unlink()
        match = f"{shard.name} is missing"
    elif damage == "truncate_shard":
        os.truncate(shard, shard.stat().st_size // 2)
        match = f"{shard.name} has {shard.stat().st_size} bytes"
    elif damage == "grow_shard":
        with open(shard, "ab") as handle:
            handle.write(b"\x00" * 10)
        match = f"{shard.name} has"
    else:
        (dst / manifest.sample_index["paths"].path).unlink()
        match = r"samples/paths-[0-9a-f]{16}\.bin is missing"
    with pytest.raises(ShardError, match=match) as info:
        open_dataset(dst)
    assert "overwrite=True" in str(info.value)

