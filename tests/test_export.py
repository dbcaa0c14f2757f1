"""``packer export``: a packed dataset back as an ImageFolder tree, byte for byte for ``original``."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import MakeTree
from imagetools import image_bytes, standard_spec, tree_files, truncated_jpeg
from PIL import Image

import packer
from packer.cli import cli
from packer.cli.formatting import format_export
from packer.errors import OutputError, OutputExistsError, UnknownNameError
from packer.format.backends import Backend
from packer.format.manifest import Manifest
from packer.format.shardset import ShardSet
from packer.tools.export.writer import export_dataset


def _convert(src: Path, dst: Path, backend: str = "lmdb", codec: str = "original",
             options: dict[str, int] | None = None, **kwargs: object) -> Manifest:
    result = packer.convert(src, dst, to=backend, codec=codec, codec_options=options or {}, workers=1,
                            progress=False, **kwargs)  # type: ignore[arg-type]
    return result.manifest


@pytest.fixture
def source(make_tree: MakeTree) -> Path:
    """The standard tree plus two files conversion skips."""
    spec = standard_spec()
    spec["dog/broken.jpg"] = truncated_jpeg()
    spec["cat/sub/empty.png"] = b""
    return make_tree(spec)


def _images(root: Path) -> dict[str, tuple[int, str]]:
    return {rel: v for rel, v in tree_files(root).items() if not rel.endswith(".txt")}


def test_round_trip_is_byte_identical(source: Path, tmp_path: Path, backend: Backend) -> None:
    manifest = _convert(source, tmp_path / "dst", backend.name, shard_size=2000)
    assert len(manifest.shards) > 1 and len(manifest.skipped) == 2
    result = export_dataset(tmp_path / "dst", tmp_path / "out")
    expected = {rel: v for rel, v in _images(source).items()
                if rel not in {s.path for s in manifest.skipped}}
    assert tree_files(tmp_path / "out") == expected
    assert (result.written, result.renamed, result.skipped_in_dataset, result.not_selected) == (14, 0, 2, 0)
    assert result.bytes_written == sum(size for size, _ in expected.values())
    assert "Exported 14 samples of 4 classes" in format_export(result)


def test_export_then_convert_gives_the_same_shards(standard_tree: Path, tmp_path: Path,
                                                   backend: Backend) -> None:
    # Without skipped files: an LMDB shard's header records a map size planned from every
    # source file, skipped ones included, so only then are the shard files identical.
    manifest = _convert(standard_tree, tmp_path / "dst", backend.name, shard_size=2000)
    export_dataset(tmp_path / "dst", tmp_path / "out")
    again = _convert(tmp_path / "out", tmp_path / "again", backend.name, shard_size=2000)
    assert len(manifest.shards) > 1
    assert [s.sha256 for s in again.shards] == [s.sha256 for s in manifest.shards]
    assert again.classes == manifest.classes
    # Labels and paths are the same files; `sources` records the files' mtimes, which differ.
    assert {k: v for k, v in again.sample_index.items() if k != "sources"} == {
        k: v for k, v in manifest.sample_index.items() if k != "sources"}


@pytest.mark.parametrize("codec", ["jpeg", "pixels"])
def test_reencoded_datasets_export_their_stored_format(source: Path, tmp_path: Path, codec: str) -> None:
    manifest = _convert(source, tmp_path / "dst", "hdf5", codec, {"resize": 16})
    result = export_dataset(tmp_path / "dst", tmp_path / "out")
    suffix, fmt = (".jpg", "JPEG") if codec == "jpeg" else (".png", "PNG")
    shards = ShardSet(tmp_path / "dst")
    ds = packer.open_dataset(tmp_path / "dst")
    scanned = packer.scan_imagefolder(tmp_path / "out")
    assert scanned.classes == manifest.classes
    assert len(scanned.items) == result.written == 14
    for i, item in enumerate(scanned.items):  # renaming keeps this tree's order
        relpath, target = ds.samples[i]
        assert item.label == target
        assert os.path.splitext(item.relpath)[0] == os.path.splitext(relpath)[0]
        keep = (".jpg", ".jpeg") if codec == "jpeg" else (".png",)
        ext = os.path.splitext(relpath)[1]
        assert os.path.splitext(item.relpath)[1] == (ext if ext.lower() in keep else suffix)
        data = (tmp_path / "out" / item.relpath).read_bytes()
        assert Image.open(io.BytesIO(data)).format == fmt
        if codec == "jpeg":
            assert data == shards.read(i)
        else:
            assert np.array_equal(np.asarray(Image.open(io.BytesIO(data))), np.asarray(ds[i][0]))
    assert result.renamed == sum(a.relpath != b[0] for a, b in zip(scanned.items, ds.samples, strict=True))
    assert f"named {suffix}" in format_export(result)


def test_a_new_suffix_never_takes_another_files_name(make_tree: MakeTree, tmp_path: Path) -> None:
    src = make_tree({"c/a.png": image_bytes(".png", 9, 9, 1), "c/a.jpg": image_bytes(".jpg", 9, 9, 2),
                     "c/b.webp": image_bytes(".webp", 9, 9, 3)})
    _convert(src, tmp_path / "dst", codec="jpeg")
    export_dataset(tmp_path / "dst", tmp_path / "out")
    assert sorted(tree_files(tmp_path / "out")) == ["c/a.jpg", "c/a.png.jpg", "c/b.jpg"]


def test_subsets_by_class_and_per_class_limit(source: Path, tmp_path: Path) -> None:
    _convert(source, tmp_path / "dst")
    one = export_dataset(tmp_path / "dst", tmp_path / "dog", classes=["dog"], limit=2)
    assert sorted(tree_files(tmp_path / "dog")) == ["dog/a.JPG", "dog/b.Png"]
    assert (one.written, one.not_selected, one.classes) == (2, 12, ("dog",))
    summary = format_export(one)
    assert "12 sample(s) not selected" in summary and "2 file(s) the conversion skipped" in summary
    export_dataset(tmp_path / "dst", tmp_path / "firsts", limit=1)
    assert sorted(tree_files(tmp_path / "firsts")) == [
        "cat/001.jpg", "dog/a.JPG", "zebra fish/with space.png", "éclair/1.png"]
    with pytest.raises(UnknownNameError, match="'cat', 'dog', 'zebra fish', 'éclair'"):
        export_dataset(tmp_path / "dst", tmp_path / "x", classes=["cow"])
    with pytest.raises(ValueError, match="limit"):
        export_dataset(tmp_path / "dst", tmp_path / "x", limit=0)


def test_a_class_with_every_file_skipped_keeps_its_folder(make_tree: MakeTree, tmp_path: Path) -> None:
    src = make_tree({"a/x.png": image_bytes(".png"), "b/bad.jpg": truncated_jpeg(),
                     "c/y.png": image_bytes(".png", seed=4)})
    _convert(src, tmp_path / "dst")
    export_dataset(tmp_path / "dst", tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "out")) == ["a", "b", "c"] and not os.listdir(tmp_path / "out" / "b")
    again = packer.scan_imagefolder(tmp_path / "out", allow_empty=True)
    assert again.classes == ("a", "b", "c") and [i.label for i in again.items] == [0, 2]


def test_output_rules(source: Path, tmp_path: Path) -> None:
    dst, out = tmp_path / "dst", tmp_path / "out"
    _convert(source, dst)
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="not empty.*overwrite=True"):
        export_dataset(dst, out)
    assert os.listdir(out) == ["keep.txt"]
    export_dataset(dst, out, overwrite=True)
    export_dataset(dst, out, overwrite=True)  # again: files replaced, nothing else touched
    assert (out / "keep.txt").read_text() == "mine" and len(tree_files(out)) == 15
    for bad in (dst, dst / "inside", source, tmp_path):
        with pytest.raises(OutputError):
            export_dataset(dst, bad, overwrite=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="not a directory"):
        export_dataset(dst, tmp_path / "file")


def test_interrupted_export_leaves_no_partial_file(source: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _convert(source, tmp_path / "dst")
    real_replace, calls = os.replace, []

    def interrupting(a: str, b: str) -> None:
        calls.append(b)
        if len(calls) == 5:
            raise KeyboardInterrupt
        real_replace(a, b)

    monkeypatch.setattr(os, "replace", interrupting)
    with pytest.raises(KeyboardInterrupt):
        export_dataset(tmp_path / "dst", tmp_path / "out")
    monkeypatch.undo()
    left = {rel: v for rel, v in tree_files(tmp_path / "out").items()}
    assert len(left) == 4 and all(left[rel] == tree_files(source)[rel] for rel in left)
    export_dataset(tmp_path / "dst", tmp_path / "out", overwrite=True)
    assert len(tree_files(tmp_path / "out")) == 14


def test_cli_export(source: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    assert "Usage: packer export" in runner.invoke(cli, ["export", "--help"], prog_name="packer").stdout
    _convert(source, tmp_path / "dst")
    out = tmp_path / "out"
    result = runner.invoke(cli, ["export", str(tmp_path / "dst"), str(out), "--classes", "cat",
                                 "--classes", "éclair", "-q"])
    assert result.exit_code == 0 and result.stdout == ""
    assert len(tree_files(out)) == 7
    again = runner.invoke(cli, ["export", str(tmp_path / "dst"), str(out)])
    assert again.exit_code == 3 and again.stderr.startswith("Error: ") and "--overwrite" in again.stderr
    result = runner.invoke(cli, ["export", str(tmp_path / "dst"), str(out), "--overwrite", "--limit", "3"])
    assert result.exit_code == 0, result.output
    assert "Exported 12 samples of 4 classes" in result.stdout and "skipped" in result.stdout
    assert runner.invoke(cli, ["export", str(tmp_path / "dst"), str(out), "--limit", "0"]).exit_code == 2
    unknown = runner.invoke(cli, ["export", str(tmp_path / "dst"), str(tmp_path / "o2"), "--classes", "x"])
    assert unknown.exit_code == 1 and "no class 'x'" in unknown.stderr
    missing = runner.invoke(cli, ["export", str(tmp_path / "nope"), str(tmp_path / "o3")])
    assert missing.exit_code == 1 and missing.stderr.count("\n") == 1
