"""Contact sheets of datasets with fields: boxes with their labels and masks drawn on the
thumbnails, where they are in the image, in their class's colour; ``overlays=False`` and
``--no-overlays`` show the images alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import packer
from packer.cli import cli
from packer.tools.preview.overlay import class_colour
from packer.tools.preview.sheet import make_contact_sheet

GREY = 100
THUMB = 64  # images are 64 x 32: a thumbnail is the image itself, centred in its cell


def _schema(fmt: str, normalized: bool) -> list[dict[str, Any]]:
    return [{"name": "image", "type": "image"},
            {"name": "mask", "type": "mask", "params": {"image": "image", "classes": ["bg", "road", "car"]}},
            {"name": "boxes", "type": "boxes",
             "params": {"image": "image", "format": fmt, "normalized": normalized}},
            {"name": "box_labels", "type": "box_labels",
             "params": {"boxes": "boxes", "classes": ["car", "bus"]}}]


def _write(dst: Path, fmt: str = "xyxy", normalized: bool = False) -> None:
    mask = np.zeros((32, 64), np.uint8)
    mask[:, :16] = 1  # the left quarter is road
    mask[0, 63] = 255  # ignored: never coloured
    corners = np.array([[32.0, 8.0, 56.0, 28.0]])  # the box, as xyxy pixels
    x1, y1, x2, y2 = corners.T
    boxes = {"xyxy": corners, "xywh": np.stack([x1, y1, x2 - x1, y2 - y1], 1),
             "cxcywh": np.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], 1)}[fmt]
    if normalized:
        boxes = boxes / np.array([64, 32, 64, 32])
    sample = {"__key__": "a", "image": np.full((32, 64, 3), GREY, np.uint8), "mask": mask,
              "boxes": boxes.astype(np.float32), "box_labels": [1]}
    packer.write(dst, [sample], _schema(fmt, normalized), to="lmdb", workers=1)


def _cell(sheet: Any) -> np.ndarray:
    left, top, right, bottom = sheet.cells[0].box
    pixels = np.asarray(sheet.image.convert("RGB"))[top:bottom, left:right]
    return pixels[16:48]  # the image's rows, letterboxed between grey bands


@pytest.mark.parametrize(("fmt", "normalized"), [("xyxy", False), ("xywh", False), ("cxcywh", True)])
def test_boxes_and_masks_are_drawn_where_they_are(tmp_path: Path, fmt: str, normalized: bool) -> None:
    _write(tmp_path / "ds", fmt, normalized)
    cell = _cell(make_contact_sheet(tmp_path / "ds", thumb=THUMB))
    road = np.round(0.55 * GREY + 0.45 * np.array(class_colour(1)))
    assert np.abs(cell[20, 5].astype(int) - road).max() <= 1  # the mask's road, blended
    assert cell[20, 24].tolist() == [GREY] * 3  # background class 0: left clear
    assert cell[0, 63].tolist() == [GREY] * 3  # the ignore value: left clear
    bus = list(class_colour(1))
    assert cell[20, 32].tolist() == bus and cell[20, 56].tolist() == bus  # the box's left and right edges
    assert cell[18, 44].tolist() == [GREY] * 3  # inside the box: only its outline is drawn
    label_band = cell[0:8, 32:40].reshape(-1, 3).tolist()
    assert bus in label_band  # the class name's tag above the box


def test_overlays_can_be_left_out(tmp_path: Path) -> None:
    _write(tmp_path / "ds")
    cell = _cell(make_contact_sheet(tmp_path / "ds", thumb=THUMB, overlays=False))
    assert (cell == GREY).all()
    out = tmp_path / "sheet.png"
    result = CliRunner().invoke(cli, ["preview", str(tmp_path / "ds"), "-o", str(out), "--thumb", "64",
                                      "--no-overlays"])
    assert result.exit_code == 0, result.output
    plain = np.asarray(Image.open(out).convert("RGB"))
    drawn_out = tmp_path / "drawn.png"
    assert CliRunner().invoke(cli, ["preview", str(tmp_path / "ds"), "-o", str(drawn_out), "--thumb",
                                    "64"]).exit_code == 0
    assert not np.array_equal(plain, np.asarray(Image.open(drawn_out).convert("RGB")))


def test_an_imagefolder_sheet_is_unchanged_by_overlays(tmp_path: Path) -> None:
    folder = tmp_path / "src" / "cat"
    folder.mkdir(parents=True)
    Image.fromarray(np.full((20, 20, 3), 50, np.uint8)).save(folder / "a.png")
    packer.convert(tmp_path / "src", tmp_path / "ds", to="lmdb", workers=1)
    with_overlays = make_contact_sheet(tmp_path / "ds", thumb=32)
    without = make_contact_sheet(tmp_path / "ds", thumb=32, overlays=False)
    assert np.array_equal(np.asarray(with_overlays.image), np.asarray(without.image))


@pytest.mark.parametrize("normalized", [False, True])
def test_outlines_are_filled_in_their_box_colour(tmp_path: Path, normalized: bool) -> None:
    ring = np.array([4.0, 4.0, 28.0, 4.0, 28.0, 28.0, 4.0, 28.0])  # a square at the left, in pixels
    schema = [{"name": "image", "type": "image"},
              {"name": "boxes", "type": "boxes", "params": {"image": "image", "normalized": normalized}},
              {"name": "box_labels", "type": "box_labels",
               "params": {"boxes": "boxes", "classes": ["car", "bus"]}},
              {"name": "outline", "type": "polygons", "params": {"boxes": "boxes", "normalized": normalized}}]
    scale = np.array([64, 32, 64, 32]) if normalized else np.ones(4)
    sample = {"__key__": "a", "image": np.full((32, 64, 3), GREY, np.uint8),
              "boxes": (np.array([[4.0, 4.0, 28.0, 28.0]]) / scale).astype(np.float32), "box_labels": [1],
              "outline": [[(ring / np.tile(scale[:2], 4)).tolist()]]}
    packer.write(tmp_path / "ds", [sample], schema, to="lmdb", workers=1)
    cell = _cell(make_contact_sheet(tmp_path / "ds", thumb=THUMB))
    inside = np.round(GREY + 115 / 255 * (np.array(class_colour(1)) - GREY))
    assert np.abs(cell[16, 16].astype(int) - inside).max() <= 2  # the ring, filled half transparent
    assert cell[16, 48].tolist() == [GREY] * 3  # outside it: untouched
