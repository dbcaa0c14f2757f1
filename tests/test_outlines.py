"""The ``polygons`` field type and the joint transforms moving outlines with their boxes: COCO
polygons and crowd RLEs, YOLO's normalised segments; the forms checked at write time, rings
clipped exactly to the output, mirrored with a flip, dropped with their boxes, and the instance
masks drawn from the moved outlines equal to the masks of the source placed as the image is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

import packer
from packer.format.fields.base import FieldValueError
from packer.format.fields.registry import field_type
from packer.format.fields.types.values import JsonType
from packer.read.fields.coco_masks import instance_masks
from packer.read.joint import JointLetterbox, JointRandomResizedCropFlip, JointScaleJitterCrop
from packer.read.joint.layouts import crop_placement, letterbox_placement
from packer.read.joint.outlines import clip_ring, move_outlines
from packer.read.joint.pixels import place_mask
from packer.read.joint.targets import OutlineField, Targets, targets_for_schema

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword")
PARAMS = {"boxes": "boxes", "normalized": False, "max_bytes": 1 << 20}
WIDTH, HEIGHT = 64, 48


def _encode(value: Any, count: int, **params: Any) -> bytes:
    return field_type("polygons").encode(value, {**PARAMS, **params}, context={"boxes.count": count})


def _area(points: np.ndarray) -> float:
    x, y = points[:, 0], points[:, 1]
    return 0.5 * abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


def test_every_outline_form_is_stored_as_canonical_json() -> None:
    value = [[1, 2, 3, 4, 5, 6], [[1, 1, 9, 1, 9, 9], [2.5, 2, 4, 2, 4, 4]], None, [],
             {"size": [4, 5], "counts": "abc"}, {"size": [4, 5], "counts": [3, 2, 15]}]
    stored = _encode(value, 6)
    assert stored == JsonType().encode(value, {"max_bytes": 1 << 20}, context={})  # json's very bytes
    assert field_type("polygons").decode(stored, PARAMS) == value
    assert _encode(None, 0) == b"[]"


@pytest.mark.parametrize(("value", "count", "reason", "detail"), [
    ([[1, 2, 3, 4, 5, 6]], 2, "box_count", "1 outlines for 2 boxes"),
    ([[1, 2, 3]], 1, "invalid_value", "box 0's outline"),
    ([[[1, 2, 3, 4], "x"]], 1, "invalid_value", "ring"),
    ([{"size": [4], "counts": "a"}], 1, "invalid_value", "neither"),
    ([[1, 2, float("nan"), 4]], 1, "invalid_value", "box 0"),
    ("not a list", 1, "invalid_value", "one outline per box"),
])
def test_a_value_that_is_no_outline_is_a_skip_with_its_reason(value: Any, count: int, reason: str,
                                                               detail: str) -> None:
    with pytest.raises(FieldValueError) as caught:
        _encode(value, count)
    assert caught.value.reason == reason and detail in caught.value.detail


def test_a_normalised_field_refuses_an_rle_and_a_pixel_one_refuses_a_resized_store() -> None:
    with pytest.raises(FieldValueError, match="RLE cannot be normalized"):
        _encode([{"size": [4, 5], "counts": "abc"}], 1, normalized=True)
    schema = [{"name": "image", "type": "image", "params": {"codec": "jpeg", "codec_params": {"resize": 32}}},
              {"name": "boxes", "type": "boxes", "params": {"image": "image", "normalized": True}},
              {"name": "outline", "type": "polygons", "params": {"boxes": "boxes"}}]
    with pytest.raises(packer.SchemaError, match="outline"):
        packer.format.fields.schema.Schema.of(schema)
    schema[2]["params"]["normalized"] = True
    assert packer.format.fields.schema.Schema.of(schema)["outline"].params["normalized"] is True


def test_clipping_a_ring_is_exact() -> None:
    square = np.array([[-10, -10], [30, -10], [30, 30], [-10, 30]], np.float64)
    corners = sorted(map(tuple, clip_ring(square, 20, 25)))
    assert np.allclose(corners, sorted([(0, 0), (20, 0), (20, 25), (0, 25)]))
    triangle = np.array([[10, 10], [40, 10], [10, 40]], np.float64)  # cut by x <= 20 and y <= 20
    clipped = clip_ring(triangle, 20, 20)
    assert _area(clipped) == pytest.approx(100 - 0)  # the 10x10 square [10, 20]^2 lies inside the triangle
    assert len(clip_ring(np.array([[30, 30], [40, 30], [40, 40]], np.float64), 20, 20)) == 0


def _draw(rings: list[list[float]], width: int, height: int) -> np.ndarray:
    """The rings filled at ``width`` x ``height`` by pycocotools, as COCO.annToMask does."""
    return instance_masks([rings], height, width)[0]


def test_moved_polygons_draw_the_placed_mask() -> None:
    pytest.importorskip("pycocotools.mask")
    rings = [[4.0, 4.0, 40.0, 6.0, 44.0, 40.0, 8.0, 36.0], [50.0, 2.0, 62.0, 2.0, 62.0, 46.0]]
    source = _draw(rings, WIDTH, HEIGHT)
    for placement in (crop_placement((5, 10, 40, 30), (96, 128), flip=True),  # scaled up, cut, mirrored
                      letterbox_placement(WIDTH, HEIGHT, (100, 100))):  # padded
        moved = move_outlines([rings], np.array([True]), placement, (WIDTH, HEIGHT))[0]
        height, width = placement.size
        drawn = _draw(moved, width, height)
        expected = place_mask(source, placement, (WIDTH, HEIGHT), 0).numpy()
        assert np.all(np.array(moved[0][0::2]) <= width) and np.all(np.array(moved[0][1::2]) <= height)
        union = np.logical_or(drawn, expected).sum()
        assert np.logical_and(drawn, expected).sum() / union > 0.9  # edges drawn at another scale


def test_rles_are_placed_exactly_and_entries_follow_their_boxes() -> None:
    mask_api = pytest.importorskip("pycocotools.mask")
    mask = np.zeros((HEIGHT, WIDTH), np.uint8)
    mask[10:30, 5:50] = 1
    rle = mask_api.encode(np.asfortranarray(mask))
    entry = {"size": [HEIGHT, WIDTH], "counts": rle["counts"].decode("ascii")}
    placement = crop_placement((0, 0, 40, 40), (20, 20), flip=True)
    moved = move_outlines([[1, 1, 2, 1, 2, 2], entry, None], np.array([False, True, True]),
                          placement, (WIDTH, HEIGHT))
    assert len(moved) == 2 and moved[1] is None
    decoded = mask_api.decode({"size": moved[0]["size"], "counts": moved[0]["counts"].encode("ascii")})
    assert np.array_equal(decoded, place_mask(mask, placement, (WIDTH, HEIGHT), 0).numpy())
    with pytest.raises(ValueError, match="2 outlines for 3 boxes"):
        move_outlines([None, None], np.ones(3, bool), placement, (WIDTH, HEIGHT))


def _picture() -> bytes:
    image = Image.new("RGB", (WIDTH, HEIGHT), (30, 60, 90))
    ImageDraw.Draw(image).rectangle((4, 4, 40, 40), fill=(200, 10, 10))
    from io import BytesIO
    out = BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _coco(folder: Path) -> Path:
    """A COCO file (as pycocotools reads them) of one image: a polygon in two parts, a crowd RLE."""
    mask_api = pytest.importorskip("pycocotools.mask")
    folder.mkdir()
    (folder / "a.png").write_bytes(_picture())
    crowd = np.zeros((HEIGHT, WIDTH), np.uint8)
    crowd[30:44, 40:60] = 1
    counts = mask_api.encode(np.asfortranarray(crowd))["counts"].decode("ascii")
    annotations = [
        {"id": 1, "image_id": 7, "category_id": 3, "bbox": [4, 4, 36, 36], "iscrowd": 0,
         "segmentation": [[4, 4, 40, 4, 40, 40], [4, 10, 20, 40, 4, 40]]},
        {"id": 2, "image_id": 7, "category_id": 3, "bbox": [40, 30, 20, 14], "iscrowd": 1,
         "segmentation": {"size": [HEIGHT, WIDTH], "counts": counts}},
    ]
    data = {"images": [{"id": 7, "file_name": "a.png", "width": WIDTH, "height": HEIGHT}],
            "annotations": annotations, "categories": [{"id": 3, "name": "thing"}]}
    (folder / "instances.json").write_text(json.dumps(data))
    return folder / "instances.json"


@pytest.mark.filterwarnings("ignore:__array__ implementation doesn't accept a copy keyword")
@pytest.mark.parametrize("transform", [JointLetterbox, JointRandomResizedCropFlip, JointScaleJitterCrop])
def test_a_coco_dataset_moves_its_segmentation_with_its_boxes(tmp_path: Path, transform: type) -> None:
    path = _coco(tmp_path / "coco")
    packer.convert(path, tmp_path / "ds", to="lmdb", workers=1)
    dataset = packer.open_dataset(tmp_path / "ds", decode={"image": False})
    assert dataset.schema["segmentation"].type == "polygons"
    assert targets_for_schema(dataset.schema).outlines == {"segmentation": OutlineField("boxes")}
    sample = dataset[0]
    source_masks = instance_masks(sample["segmentation"], HEIGHT, WIDTH)
    for seed in range(6):
        joint = transform.for_schema(dataset.schema, 56, generator=torch.Generator().manual_seed(seed))
        placement = joint.placement(WIDTH, HEIGHT)
        joint.generator = torch.Generator().manual_seed(seed)
        out = joint(sample)
        assert len(out["segmentation"]) == len(out["boxes"]) == len(out["box_labels"])
        masks = packer.CocoMasks()(out)["masks"]
        assert masks.shape[1:] == (56, 56)
        _, keep = packer.read.joint.boxes.move_boxes(sample["boxes"], placement, (WIDTH, HEIGHT), fmt="xywh")
        for mask, source in zip(masks, source_masks[keep], strict=True):
            expected = place_mask(source, placement, (WIDTH, HEIGHT), 0).numpy()
            union = np.logical_or(mask, expected).sum()
            assert union == 0 or np.logical_and(mask, expected).sum() / union > 0.8


def test_yolo_segments_stay_flat_and_normalised() -> None:
    targets = Targets.of("image", (), {"boxes": packer.BoxField("cxcywh", True)},
                         {"segments": OutlineField("boxes", normalized=True)})
    joint = JointLetterbox(32, boxes=dict(targets.boxes), outlines=dict(targets.outlines))
    sample = {"image": _picture(), "boxes": np.array([[0.25, 0.5, 0.5, 0.5]], np.float32),
              "segments": [[0.0, 0.25, 0.5, 0.25, 0.5, 0.75]]}
    out = joint(sample)
    ring = np.array(out["segments"][0]).reshape(-1, 2)
    assert ring.shape == (3, 2) and np.all((ring >= 0) & (ring <= 1))
    # letterbox 64x48 -> 32x24 centred in 32x32: y moves by 4/32 and scales by 24/32
    top, bottom = 0.25 * 0.75 + 0.125, 0.75 * 0.75 + 0.125
    assert np.allclose(ring, [[0.0, top], [0.5, top], [0.5, bottom]])
    with pytest.raises(ValueError, match="not among the boxes moved"):
        Targets.of("image", (), {}, {"segments": "boxes"})


def test_a_flip_mirrors_a_ring() -> None:
    placement = crop_placement((0, 0, HEIGHT, WIDTH), (HEIGHT, WIDTH), flip=True)
    moved = move_outlines([[0, 0, 10, 0, 10, 10]], np.array([True]), placement, (WIDTH, HEIGHT))[0]
    assert sorted(zip(moved[0::2], moved[1::2], strict=True)) == sorted([(64, 0), (54, 0), (54, 10)])


def test_an_update_gives_an_older_json_segmentation_the_polygons_type(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import packer.source.coco.source as source
    path = _coco(tmp_path / "coco")
    current = source.coco_schema

    def before_polygons(names: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
        *fields, last = current(names)
        return (*fields, {**last, "type": "json", "params": {}})

    monkeypatch.setattr(source, "coco_schema", before_polygons)
    packer.convert(path, tmp_path / "ds", to="lmdb", workers=1)
    old = packer.open_dataset(tmp_path / "ds")
    assert old.schema["segmentation"].type == "json"
    assert targets_for_schema(old.schema).outlines == {}  # moved by nothing: passed through
    monkeypatch.setattr(source, "coco_schema", current)
    result = packer.update(path, tmp_path / "ds")
    assert result.shards_reused == 1 and result.shards_written == 0  # the same bytes
    again = packer.open_dataset(tmp_path / "ds")
    assert again.schema["segmentation"].type == "polygons"
    assert again[0]["segmentation"] == old[0]["segmentation"]
