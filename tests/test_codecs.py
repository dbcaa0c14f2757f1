"""The convert-time codecs: ``jpeg`` and ``pixels``, with and without ``resize``, against the
reference pixels. What every codec promises (a plugin's too) is the codec contract's
(tests/test_contracts.py, :mod:`packer.testing.codecs`)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from imagetools import cmyk_jpeg, grayscale_png, jpeg_bytes, png_bytes, truncated_jpeg, write_tree
from PIL import Image

import packer
from packer.cli import cli
from packer.errors import UnknownNameError
from packer.format.backends import Backend
from packer.format.codecs import Codec, JpegCodec, PixelsCodec, get_codec, target_size


def _tree(root: Path) -> Path:
    return write_tree(root, {
        "big/wide.jpg": jpeg_bytes(120, 80, 1),
        "big/tall.png": png_bytes(60, 100, 2),
        "big/gray.png": grayscale_png(),
        "big/cmyk.jpg": cmyk_jpeg(),
        "small/tiny.png": png_bytes(20, 16, 3),
        "small/broken.jpg": truncated_jpeg(),
    })


def _reference(path: Path, resize: int | None) -> np.ndarray:
    """ImageFolder's RGB pixels, shrunk with Pillow as the codec promises (no DCT scaling)."""
    rgb = Image.open(path).convert("RGB")
    size = target_size(*rgb.size, resize)
    return np.asarray(rgb if size == rgb.size else rgb.resize(size, Image.Resampling.LANCZOS))


@pytest.mark.parametrize(("width", "height", "resize", "expected"), [
    (400, 300, 256, (341, 256)), (300, 400, 256, (256, 341)), (200, 100, 256, (200, 100)),
    (256, 512, 256, (256, 512)), (1000, 3, 2, (667, 2)), (5, 5, None, (5, 5)),
])
def test_target_size_keeps_aspect_and_never_enlarges(width: int, height: int, resize: int | None,
                                                     expected: tuple[int, int]) -> None:
    assert target_size(width, height, resize) == expected


def test_pixels_codec_stores_exactly_the_reference_pixels(tmp_path: Path, backend: Backend) -> None:
    src = _tree(tmp_path / "src")
    result = packer.convert(src, tmp_path / "dst", to=backend.name, codec="pixels",
                            codec_options={"resize": 32})
    manifest = result.manifest
    assert manifest.codec == "pixels" and manifest.codec_params["resize"] == 32
    assert [(s.path, s.reason) for s in manifest.skipped] == [("small/broken.jpg", "truncated")]
    ds = packer.open_dataset(tmp_path / "dst")
    for index, (relpath, _) in enumerate(ds.samples):
        got = np.asarray(ds[index][0])
        want = _reference(src / relpath, 32)
        assert got.shape == want.shape, relpath
        if relpath.endswith(".png"):  # no DCT-domain scaling: the same pixels exactly
            assert np.array_equal(got, want), relpath
        else:  # JPEG: decoded at a reduced scale first (Pillow's draft), then resized
            assert np.abs(got.astype(int) - want).mean() < 6, relpath
    assert min(ds[ds.samples.index(("small/tiny.png", 1))][0].size) == 16  # never enlarged
    assert packer.verify_dataset(tmp_path / "dst", deep=True).ok


def test_jpeg_codec_reencodes_close_to_the_reference(tmp_path: Path, backend: Backend) -> None:
    src = _tree(tmp_path / "src")
    packer.convert(src, tmp_path / "dst", to=backend.name, codec="jpeg",
                   codec_options={"resize": 40, "quality": 95})
    ds = packer.open_dataset(tmp_path / "dst")
    raw = packer.open_dataset(tmp_path / "dst", decode=False)
    assert ds.manifest.codec_params == {"quality": 95, "resize": 40, "subsampling": "4:2:0",
                                        "exif_transpose": False}
    for index, (relpath, _) in enumerate(ds.samples):
        stored = raw[index][0]
        assert stored[:3] == b"\xff\xd8\xff"  # stored as JPEG, whatever the source
        want = _reference(src / relpath, 40)
        if relpath.endswith(".png"):  # no DCT-domain scaling: exactly the reference, encoded
            buffer = io.BytesIO()
            Image.fromarray(want).save(buffer, "JPEG", quality=95, subsampling="4:2:0")
            assert stored == buffer.getvalue(), relpath
        got = np.asarray(ds[index][0]).astype(float)
        assert got.shape == want.shape
        # The test images are noise, JPEG's worst case; photos come out far closer.
        psnr = 10 * np.log10(255**2 / max(np.mean((got - want.astype(float)) ** 2), 1e-9))
        assert psnr > 18, (relpath, psnr)


def test_every_codec_writes_the_same_shards_whatever_the_workers(tmp_path: Path, codec: Codec) -> None:
    src = _tree(tmp_path / "src")
    options = {name: value for name, value in {"resize": 30, "quality": 85}.items() if name in codec.takes}
    one = packer.convert(src, tmp_path / "a", to="lmdb", codec=codec.name, codec_options=options or None,
                         workers=1)
    two = packer.convert(src, tmp_path / "b", to="lmdb", codec=codec.name, codec_options=options or None,
                         workers=3)
    assert [s.sha256 for s in one.manifest.shards] == [s.sha256 for s in two.manifest.shards]


def test_shards_are_planned_by_stored_size(tmp_path: Path) -> None:
    spec = {f"c/{i:02d}.jpg": jpeg_bytes(64, 48, i) for i in range(12)}
    src = write_tree(tmp_path / "src", spec)
    # Decoded, each image is 64*48*3 + 12 = 9228 bytes, whatever the JPEG size: the plan counts
    # that (shards hold a quarter to twice the shard size), not the few hundred JPEG bytes.
    result = packer.convert(src, tmp_path / "dst", to="hdf5", codec="pixels", shard_size="20kB")
    plan = packer.plan_conversion(src, to="hdf5", codec="pixels", shard_size="20kB")
    assert [(p.start, p.num_images) for p in plan.shards] == [
        (s.first, s.num_samples) for s in result.manifest.shards]
    assert len(plan.shards) >= 3
    assert all(1 <= s.num_samples <= 4 for s in result.manifest.shards)  # at most 40 kB each
    assert all(p.planned_bytes == 9228 * p.num_images for p in plan.shards)


def test_codec_options_are_checked() -> None:
    assert get_codec("jpeg", {"quality": 80}) == JpegCodec(quality=80)
    assert get_codec("pixels", {"resize": 7}) == PixelsCodec(resize=7)
    with pytest.raises(UnknownNameError, match="quality must be an integer from 1 to 100"):
        get_codec("jpeg", {"quality": 101})
    with pytest.raises(UnknownNameError, match="has no option quality"):
        get_codec("pixels", {"quality": 80})
    with pytest.raises(UnknownNameError, match="available: jpeg, original, pixels"):
        get_codec("webp")
    with pytest.raises(ValueError, match="resize must be a positive"):
        PixelsCodec(resize=0)
    with pytest.raises(ValueError, match="not a packer pixels record"):
        PixelsCodec().decode(b"PKPX" + bytes(8) + b"extra")


def test_cli_codec_flags(tmp_path: Path) -> None:
    src = _tree(tmp_path / "src")
    runner = CliRunner()
    refused = runner.invoke(cli, ["convert", str(src), str(tmp_path / "a"), "--to", "lmdb",
                                  "--resize", "32"])
    assert refused.exit_code == 2 and "--codec jpeg or --codec pixels" in refused.stderr
    refused = runner.invoke(cli, ["convert", str(src), str(tmp_path / "a"), "--to", "lmdb",
                                  "--codec", "pixels", "--quality", "80"])
    assert refused.exit_code == 2 and "--quality needs --codec jpeg" in refused.stderr
    done = runner.invoke(cli, ["convert", str(src), str(tmp_path / "a"), "--to", "lmdb",
                               "--codec", "jpeg", "--resize", "32", "--quality", "80", "-q"])
    assert done.exit_code == 0, done.output
    info = json.loads(runner.invoke(cli, ["info", str(tmp_path / "a"), "--json"]).stdout)
    assert info["codec"] == "jpeg" and info["codec_params"]["resize"] == 32
    assert info["codec_params"]["quality"] == 80
    against = runner.invoke(cli, ["verify", str(tmp_path / "a"), "--against", str(src), "-q"])
    assert against.exit_code == 1 and "not_applicable" in against.stdout


def test_callers_ask_the_codec_instead_of_comparing_names() -> None:
    from packer.format.codecs import OriginalCodec, codec_class

    assert codec_class("original").keeps_source_bytes and not codec_class("jpeg").keeps_source_bytes
    assert codec_class("jpeg").takes == ("quality", "resize") and codec_class("pixels").takes == ("resize",)
    assert OriginalCodec().export_format().suffix is None
    assert JpegCodec().export_format().keeps == (".jpg", ".jpeg")
    pixels = PixelsCodec(resize=8)
    stored = pixels.encode(png_bytes(20, 16, 3), check="full", max_pixels=10**6)
    assert pixels.describe(stored) == (pixels.describe(stored).__class__)(10, 8, "RGB", "pixels")
    assert Image.open(io.BytesIO(pixels.exported_bytes(stored))).format == "PNG"
    assert JpegCodec().describe(jpeg_bytes(30, 20, 1)).format == "JPEG"
