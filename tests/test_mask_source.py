"""Segmentation sets as a source (packer.source.masks): an image tree and a mask tree matched by
stem, in Pascal VOC's, Cityscapes', ADE20K's and a plain images/ + masks/ layout.

The sets are built here as those projects ship them: VOC's masks are palette PNGs (mode P, the
class index per pixel, 255 on object boundaries) beside JPEGs; Cityscapes' ``gtFine`` holds
``_labelIds.png`` greyscale masks among colour masks and polygon files. Masks come back exactly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import packer
from packer.cli import cli
from packer.errors import EmptySourceError, SourceError, SourceNotFoundError
from packer.format.backends import Backend
from packer.source.base import SourceOptions
from packer.source.masks.source import MaskPairsSource
from packer.source.registry import detect_kind

VOC_CLASSES = ("background", "aeroplane", "bicycle", "bird", "boat")
#: A VOC-shaped set's root and its masks by stem.
Voc = tuple[Path, dict[str, np.ndarray]]


def _image(path: Path, width: int, height: int, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)


def _values(width: int, height: int, seed: int, top: int) -> np.ndarray:
    """Class indices 0..top-1 in blocks, with a 255 border (VOC's boundary), as a mask holds."""
    rng = np.random.default_rng(seed)
    mask = np.repeat(np.repeat(rng.integers(0, top, (height // 4 + 1, width // 4 + 1)), 4, 0), 4, 1)
    mask = mask[:height, :width].astype(np.uint8)
    mask[0, :] = 255
    return mask


def _palette_png(path: Path, mask: np.ndarray) -> None:
    """A VOC mask: mode P, the index per pixel, a colour palette (VOC's bit-shuffled colours)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.fromarray(mask, mode="P")
    image.putpalette([(i * 37) % 256 for i in range(256 * 3)])
    image.save(path)


@pytest.fixture
def voc(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """``VOC2012/``: five JPEGs, three with a palette mask; a classes file beside it."""
    root = tmp_path / "VOC2012"
    masks = {}
    for i, stem in enumerate(["2007_000032", "2007_000039", "2007_000063", "2008_000001", "2008_000002"]):
        width, height = 24 + 4 * i, 20 + 2 * i
        _image(root / "JPEGImages" / f"{stem}.jpg", width, height, i)
        if i % 2 == 0:
            masks[stem] = _values(width, height, i, len(VOC_CLASSES))
            _palette_png(root / "SegmentationClass" / f"{stem}.png", masks[stem])
    (root / "ImageSets" / "Segmentation").mkdir(parents=True)
    (root / "ImageSets" / "Segmentation" / "train.txt").write_text("\n".join(masks) + "\n")
    (tmp_path / "voc_classes.txt").write_text("\n".join(VOC_CLASSES) + "\n", encoding="utf-8")
    return root, masks


def test_a_voc_set_converts_and_reads_back_mask_for_mask(voc: Voc,
                                                         tmp_path: Path, backend: Backend) -> None:
    root, masks = voc
    classes = tmp_path / "voc_classes.txt"
    assert detect_kind(str(root)) == "masks"
    manifest = packer.convert(root, tmp_path / "ds", to=backend.name, classes_file=classes,
                              workers=1).manifest
    assert manifest.num_samples == 3 and not manifest.skipped
    assert manifest.schema["mask"].params["classes"] == list(VOC_CLASSES)
    assert manifest.extra["masks"]["layout"] == "voc" and manifest.extra["masks"]["images_without_mask"] == 2
    notes = " ".join(manifest.extra["source"]["report"]["notes"])
    assert "2 image(s) have no mask" in notes and "JPEGImages/2007_000039.jpg" in notes
    dataset = packer.open_dataset(tmp_path / "ds")
    assert [dataset[i]["mask"].shape for i in range(3)] == [m.shape for m in masks.values()]
    for i, (stem, want) in enumerate(masks.items()):  # the mask tree's sorted order
        got = dataset[i]
        assert list(got) == ["image", "mask"]
        assert got["mask"].dtype == np.uint8 and np.array_equal(got["mask"], want)
        image = Image.open(root / "JPEGImages" / f"{stem}.jpg")
        assert np.array_equal(np.asarray(got["image"]), np.asarray(image))
    raw = packer.open_dataset(tmp_path / "ds", decode={"image": False})
    assert bytes(raw[0]["image"]) == (root / "JPEGImages" / "2007_000032.jpg").read_bytes()


def test_keys_name_the_image_and_metadata_the_mask(voc: Voc) -> None:
    root, masks = voc
    index = MaskPairsSource(str(root), SourceOptions()).scan()
    assert [item.relpath for item in index.items] == [f"JPEGImages/{stem}.jpg" for stem in masks]
    assert [json.loads(m)["mask"] for m in index.metadata] == [f"SegmentationClass/{s}.png" for s in masks]
    assert index.classes == () and index.root == str(root)


def _cityscapes(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """``cityscapes/leftImg8bit/{train,val}/<city>/`` and ``gtFine/`` with labelIds, colour and
    polygon files, as the Cityscapes download has them."""
    root = tmp_path / "cityscapes"
    masks = {}
    for split, city, number in [("train", "aachen", 19), ("train", "bochum", 7), ("train", "aachen", 3),
                                ("val", "lindau", 1)]:
        stem = f"{city}_{number:06d}_000019"
        _image(root / "leftImg8bit" / split / city / f"{stem}_leftImg8bit.png", 32, 16, number)
        labels = _values(32, 16, number, 34)
        labels[0, :] = 0
        gt = root / "gtFine" / split / city
        gt.mkdir(parents=True, exist_ok=True)
        Image.fromarray(labels, mode="L").save(gt / f"{stem}_gtFine_labelIds.png")
        Image.fromarray(np.stack([labels] * 3, -1)).save(gt / f"{stem}_gtFine_color.png")
        (gt / f"{stem}_gtFine_polygons.json").write_text("{}")
        masks[f"{split}/{city}/{stem}"] = labels
    return root, masks


def test_a_cityscapes_split_pairs_by_suffix(tmp_path: Path) -> None:
    root, masks = _cityscapes(tmp_path)
    split = root / "leftImg8bit" / "train"
    assert detect_kind(str(split)) == detect_kind(str(root)) == "masks"
    manifest = packer.convert(split, tmp_path / "ds", to="lmdb", workers=1).manifest
    train = {k: v for k, v in masks.items() if k.startswith("train/")}
    assert manifest.num_samples == len(train) == 3 and not manifest.skipped
    assert manifest.extra["masks"]["images_without_mask"] == 0
    assert manifest.scan.other_files == 2 * len(train)  # colour + polygons
    dataset = packer.open_dataset(tmp_path / "ds")
    for i, key in enumerate(sorted(train)):  # aachen before bochum, numbers sorted
        assert np.array_equal(dataset[i]["mask"], train[key])
    index = MaskPairsSource(str(split), SourceOptions()).scan()
    assert index.items[0].relpath == "leftImg8bit/train/aachen/aachen_000003_000019_leftImg8bit.png"


def test_ade20k_and_plain_pairs_are_read_by_name(tmp_path: Path, backend: Backend) -> None:
    ade = tmp_path / "ADEChallengeData2016"
    plain = tmp_path / "plain"
    want = _values(20, 12, 5, 3)
    _image(ade / "images" / "training" / "ADE_train_00000001.jpg", 20, 12, 1)
    Image.fromarray(want, mode="L").save(_parent(ade / "annotations" / "training" / "ADE_train_00000001.png"))
    _image(plain / "images" / "scene" / "a.webp", 20, 12, 2)
    Image.fromarray(want, mode="L").save(_parent(plain / "masks" / "scene" / "a.png"))
    assert detect_kind(str(ade)) == detect_kind(str(plain)) == "tree"  # "images" says too little
    for name, src in [("ade", ade / "images" / "training"), ("plain", plain)]:
        manifest = packer.convert(src, tmp_path / f"{name}.packer", to=backend.name,
                                  source_format="masks").manifest
        assert manifest.num_samples == 1, name
        assert np.array_equal(packer.open_dataset(tmp_path / f"{name}.packer")[0]["mask"], want)
    assert manifest.extra["masks"]["layout"] == "pairs"


def _parent(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def test_bad_pairs_are_skipped_with_their_reason_and_the_counts_add_up(
        voc: Voc, tmp_path: Path, any_backend: Backend) -> None:
    root, _ = voc
    masks = root / "SegmentationClass"
    _palette_png(masks / "no_image.png", _values(8, 8, 0, 3))  # a mask without its image
    _image(root / "JPEGImages" / "small.jpg", 16, 16, 9)
    _palette_png(masks / "small.png", _values(12, 16, 0, 3))  # another size than its image
    _image(root / "JPEGImages" / "colour.jpg", 8, 8, 9)
    Image.new("RGB", (8, 8), (128, 0, 0)).save(masks / "colour.png")  # VOC's colour, not its index
    _image(root / "JPEGImages" / "value.jpg", 8, 8, 9)
    _palette_png(masks / "value.png", np.full((8, 8), 7, dtype=np.uint8))  # class 7 of 5
    _image(root / "JPEGImages" / "empty.jpg", 8, 8, 9)
    _palette_png(masks / "empty.png", _values(8, 8, 0, 3))
    (root / "JPEGImages" / "empty.jpg").write_bytes(b"")
    (masks / "notes.txt").write_text("not a mask")
    classes = tmp_path / "voc_classes.txt"
    manifest = packer.convert(root, tmp_path / "ds", to=any_backend.name, classes_file=classes,
                              workers=1).manifest
    reasons = {s.path: s.reason for s in manifest.skipped}
    assert reasons == {"SegmentationClass/no_image.png": "missing_image", "JPEGImages/small.jpg": "mask_size",
                       "JPEGImages/colour.jpg": "invalid_value", "JPEGImages/value.jpg": "mask_value",
                       "JPEGImages/empty.jpg": "empty_file"}
    assert manifest.num_samples == 3
    mask_files = [p for p in masks.iterdir() if p.suffix == ".png"]
    assert manifest.num_samples + len(manifest.skipped) == len(mask_files) == 8
    assert manifest.scan.other_files == 1


def test_two_images_for_one_mask_is_one_error_before_anything_is_written(
        voc: Voc, tmp_path: Path) -> None:
    root, _ = voc
    _image(root / "JPEGImages" / "2007_000032.png", 24, 20, 0)
    with pytest.raises(SourceError, match=r"'SegmentationClass/2007_000032.png' has 2 images.*one image per"):
        packer.convert(root, tmp_path / "ds", to="lmdb")
    assert not (tmp_path / "ds").exists()


def test_a_folder_of_no_layout_and_an_empty_mask_folder_are_refused(tmp_path: Path) -> None:
    (tmp_path / "nothing").mkdir()
    with pytest.raises(SourceNotFoundError, match="JPEGImages/ \\+ SegmentationClass/ \\(voc\\)"):
        packer.convert(tmp_path / "nothing", tmp_path / "ds", to="lmdb", source_format="masks")
    empty = tmp_path / "empty"
    (empty / "JPEGImages").mkdir(parents=True)
    (empty / "SegmentationClass").mkdir()
    for allow_empty in (False, True):
        with pytest.raises(EmptySourceError, match="Found no mask .*'.png'.*SegmentationClass"):
            packer.convert(empty, tmp_path / "ds", to="lmdb", allow_empty=allow_empty)
    assert not (tmp_path / "ds").exists()


def test_a_changed_mask_is_a_changed_input(voc: Voc, tmp_path: Path) -> None:
    root, masks = voc
    converted = packer.convert(root, tmp_path / "ds", to="lmdb", workers=1, shard_size="1KB")
    shards = len(converted.manifest.shards)
    assert shards == 3
    mask = root / "SegmentationClass" / "2007_000063.png"
    changed = _values(*Image.open(mask).size, 99, len(VOC_CLASSES))
    _palette_png(mask, changed)
    os.utime(mask, ns=(1, 1))
    result = packer.update(root, tmp_path / "ds", workers=1)  # the image file is untouched
    assert (result.files_changed, result.shards_written, result.shards_reused) == (1, 1, shards - 1)
    dataset = packer.open_dataset(tmp_path / "ds")
    assert np.array_equal(dataset[1]["mask"], changed)
    assert np.array_equal(dataset[0]["mask"], masks["2007_000032"])


def test_the_command_line_dry_runs_and_converts(voc: Voc, tmp_path: Path) -> None:
    root, _ = voc
    runner = CliRunner()
    convert = ["convert", str(root), str(tmp_path / "ds"), "--to", "lmdb"]
    classes = ["--classes", str(tmp_path / "voc_classes.txt")]
    plan = runner.invoke(cli, [*convert, *classes, "--dry-run"])
    assert plan.exit_code == 0, plan.output
    assert "fields: image (image, original), mask (mask" in plan.output
    assert "2 image(s) have no mask" in plan.output
    done = runner.invoke(cli, [*convert, *classes])
    assert done.exit_code == 0, done.output
    assert "Packed 3 samples" in done.output
    refused = runner.invoke(cli, ["convert", str(root), str(tmp_path / "d2"), "--to", "lmdb",
                                  "--label-column", "x"])
    assert refused.exit_code != 0 and "--label-column apply to" in refused.output
