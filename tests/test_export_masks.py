"""``export_masks`` / ``packer export --as-masks``: a segmentation dataset written back as its image
tree beside its mask tree, in the layout it came from (VOC's here), that converts back to the same
images and masks; other datasets with masks as ``images/`` beside ``masks/``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import packer
from packer.cli import cli
from packer.errors import DatasetError

CLASSES = ["background", "aeroplane", "bicycle"]


def _voc(root: Path) -> Path:
    """``VOC2012/``: JPEGs, palette masks for three of them, and a classes file beside it."""
    rng = np.random.default_rng(5)
    for i, stem in enumerate(["2007_000032", "2007_000039", "2007_000063", "2007_000068"]):
        (root / "JPEGImages").mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / "JPEGImages" / f"{stem}.jpg")
        if i < 3:
            mask = rng.integers(0, 3, (12, 16), dtype=np.uint8)
            mask[0, 0] = 255  # VOC's boundary: ignored
            palette = Image.fromarray(mask, mode="P")
            palette.putpalette([(k * 37) % 256 for k in range(256 * 3)])
            (root / "SegmentationClass").mkdir(exist_ok=True)
            palette.save(root / "SegmentationClass" / f"{stem}.png")
    (root.parent / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    return root


def test_a_voc_set_comes_back_in_its_layout(tmp_path: Path) -> None:
    source = _voc(tmp_path / "VOC2012")
    packer.convert(source, tmp_path / "ds", to="lmdb", workers=1, classes_file=tmp_path / "classes.txt")
    result = packer.export_masks(tmp_path / "ds", tmp_path / "out")
    assert (result.written, result.layout) == (3, "voc")
    assert (tmp_path / "out" / "classes.txt").read_text().split() == CLASSES
    for stem in ("2007_000032", "2007_000039", "2007_000063"):
        assert (tmp_path / "out" / "JPEGImages" / f"{stem}.jpg").read_bytes() == \
            (source / "JPEGImages" / f"{stem}.jpg").read_bytes()
        written = np.asarray(Image.open(tmp_path / "out" / "SegmentationClass" / f"{stem}.png"))
        assert np.array_equal(written, np.asarray(Image.open(source / "SegmentationClass" / f"{stem}.png")))
    assert not (tmp_path / "out" / "JPEGImages" / "2007_000068.jpg").exists()  # no mask: no sample
    packer.convert(tmp_path / "out", tmp_path / "again", to="lmdb", workers=1,
                   classes_file=result.classes_file)
    first, again = (packer.open_dataset(tmp_path / d, decode={"image": False}) for d in ("ds", "again"))
    assert first.samples == again.samples
    for i in range(len(first)):
        assert bytes(first[i]["image"]) == bytes(again[i]["image"])
        assert np.array_equal(first[i]["mask"], again[i]["mask"])


def test_other_datasets_write_images_beside_masks_and_the_cli_says_how_back(tmp_path: Path) -> None:
    schema = [{"name": "image", "type": "image"},
              {"name": "mask", "type": "mask", "params": {"image": "image", "dtype": "uint16"}}]
    mask = np.arange(20, dtype=np.uint16).reshape(4, 5) * 1000  # values past 255: a 16-bit PNG
    packer.write(tmp_path / "ds", [{"__key__": "city/a", "image": np.zeros((4, 5, 3), np.uint8),
                                    "mask": mask}], schema, to="hdf5", workers=1)
    done = CliRunner().invoke(cli, ["export", str(tmp_path / "ds"), str(tmp_path / "out"), "--as-masks"])
    assert done.exit_code == 0, done.output
    assert "Exported 1 images and their masks (pairs layout)" in done.output
    assert "--source-format masks" in done.output and "--classes" not in done.output
    assert np.array_equal(np.asarray(Image.open(tmp_path / "out" / "masks" / "city" / "a.png")), mask)
    assert len(list((tmp_path / "out" / "images" / "city").iterdir())) == 1
    captions = [{"name": "image", "type": "image"}, {"name": "caption", "type": "text"}]
    packer.write(tmp_path / "captions", [{"__key__": "a", "image": np.zeros((4, 4, 3), np.uint8),
                                          "caption": "x"}], captions, to="lmdb", workers=1)
    with pytest.raises(DatasetError, match="no mask on its image"):
        packer.export_masks(tmp_path / "captions", tmp_path / "none")
    both = CliRunner().invoke(cli, ["export", str(tmp_path / "ds"), str(tmp_path / "x"), "--as-masks",
                                    "--as-yolo"])
    assert both.exit_code == 2 and "give one layout" in both.output
