"""``packer show``: one sample's path, class, stored size, image size and mode, and its bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import MakeTree
from imagetools import grayscale_png, image_bytes
from PIL import Image

import packer
from packer.cli import cli
from packer.cli.formatting import format_sample_info
from packer.errors import NotADatasetError
from packer.format.backends import Backend
from packer.format.codecs import pixels_array
from packer.tools.show import sample_bytes, sample_info, save_sample


def test_every_sample_is_described_as_its_source(packed_once: Path, standard_tree: Path,
                                                 any_backend: Backend) -> None:
    index = packer.scan_imagefolder(standard_tree)
    for i, item in enumerate(index.items):
        info = sample_info(packed_once, i)
        path = standard_tree / item.relpath
        with Image.open(path) as source:
            expected = (source.width, source.height, source.mode, source.format)
        assert (info.index, info.relpath, info.target) == (i, item.relpath, item.label)
        assert info.class_name == index.classes[item.label]
        assert info.stored_bytes == path.stat().st_size
        assert (info.width, info.height, info.mode, info.format) == expected
        assert (info.codec, info.backend, info.num_samples) == ("original", any_backend.name, 14)
        assert info.shard == packer.Manifest.load(packed_once).shards[0].path  # one shard here
        assert sample_bytes(packed_once, i) == path.read_bytes()


def test_negative_and_out_of_range_indices(packed_once: Path) -> None:
    assert sample_info(packed_once, -1) == sample_info(packed_once, 13)
    assert sample_info(packed_once, -14).index == 0
    for bad in (14, -15):
        with pytest.raises(IndexError, match=r"has 14 samples \(valid: 0 to 13, or -14 to -1\)"):
            sample_info(packed_once, bad)
    with pytest.raises(NotADatasetError):
        sample_info(packed_once / "nope", 0)


@pytest.mark.parametrize(("codec", "fmt"), [("jpeg", "JPEG"), ("pixels", "pixels")])
def test_reencoded_samples(standard_tree: Path, tmp_path: Path, codec: str, fmt: str) -> None:
    dst = tmp_path / codec
    packer.convert(standard_tree, dst, to="hdf5", codec=codec, codec_options={"resize": 4}, workers=1,
                   progress=False)
    out = tmp_path / "sample.bin"
    info = save_sample(dst, 0, out)
    assert (info.format, info.mode, info.codec) == (fmt, "RGB", codec)
    assert min(info.width, info.height) == 4
    stored = packer.open_dataset(dst, decode=False)[0][0]
    assert out.read_bytes() == stored and info.stored_bytes == len(stored)
    if codec == "pixels":
        assert pixels_array(stored) is not None and pixels_array(stored).shape == (info.height, info.width, 3)


def test_mode_is_the_stored_one(make_tree: MakeTree, tmp_path: Path) -> None:
    src = make_tree({"a/gray.png": grayscale_png(), "a/rgb.png": image_bytes(".png")})
    packer.convert(src, tmp_path / "dst", to="lmdb", workers=1, progress=False)
    info = sample_info(tmp_path / "dst", 0)
    described = (info.relpath, info.mode, info.format, info.width, info.height)
    assert described == ("a/gray.png", "L", "PNG", 9, 21)
    text = format_sample_info(info)
    assert "9x21 L PNG (the dataset yields it as RGB)" in text and "path     a/gray.png" in text
    assert "(the dataset yields" not in format_sample_info(sample_info(tmp_path / "dst", 1))


def test_cli_show(packed_once: Path, standard_tree: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    assert "Usage: packer show" in runner.invoke(cli, ["show", "--help"], prog_name="packer").stdout
    result = runner.invoke(cli, ["show", str(packed_once), "-1"])
    assert result.exit_code == 0, result.output
    for text in ("sample   #13 of 14", "path     éclair/2.png", "class    éclair (target 3)",
                 "codec original"):
        assert text in result.stdout
    result = runner.invoke(cli, ["show", str(packed_once), "2", "--json"])
    data = json.loads(result.stdout)
    assert data["relpath"] == "cat/sub/003.jpg" and data["class_name"] == "cat"
    assert {"stored_bytes", "width", "height", "mode", "codec"} <= set(data)
    out = tmp_path / "x.jpg"
    result = runner.invoke(cli, ["show", str(packed_once), "0", "-o", str(out)])
    assert result.exit_code == 0 and out.read_bytes() == (standard_tree / "cat/001.jpg").read_bytes()
    assert f"wrote {out.stat().st_size} bytes to {out}" in result.stdout
    wrong = runner.invoke(cli, ["show", str(packed_once), "14"])
    assert wrong.exit_code == 2 and "valid: 0 to 13, or -14 to -1" in wrong.stderr
    assert runner.invoke(cli, ["show", str(packed_once), "one"]).exit_code == 2
    missing = runner.invoke(cli, ["show", str(tmp_path / "nope"), "0"])
    assert missing.exit_code == 1 and missing.stderr.startswith("Error: ") and missing.stderr.count("\n") == 1


def test_a_sample_that_does_not_decode_is_reported(packed_once: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from packer.errors import ShardError
    from packer.format.codecs import OriginalCodec

    def broken(self: OriginalCodec, data: bytes) -> Image.Image:
        raise OSError("image file is truncated")

    monkeypatch.setattr(OriginalCodec, "decode", broken)
    with pytest.raises(ShardError, match=r"Sample 1 \(cat/002.png\).*truncated.*verify_dataset\(deep=True\)"):
        sample_info(packed_once, 1)
