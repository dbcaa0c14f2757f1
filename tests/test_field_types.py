"""The built-in field types (issue 27): round trips, determinism, every value a field refuses
(FieldValueError with its reason), damaged records (ValueError, no huge allocation) and params."""

from __future__ import annotations

import io
import math
import struct
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from PIL import Image

from packer.format.fields.base import FieldType, FieldValueError
from packer.format.fields.types import (
    BUILTIN_TYPES,
    BoxesType,
    BoxLabelsType,
    BytesType,
    FloatType,
    ImageType,
    IntType,
    JsonType,
    LabelsType,
    LabelType,
    MaskType,
    NdarrayType,
    TextType,
)

W, H = 24, 16
CONTEXT = {"image.size": (W, H), "boxes.count": 2}


def encoded(image: Image.Image, fmt: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


def photo(width: int = W, height: int = H) -> Image.Image:
    pixels = (np.arange(width * height * 3, dtype=np.uint32).reshape(height, width, 3) * 7 % 251)
    return Image.fromarray(pixels.astype(np.uint8))


def roundtrip(kind: FieldType, value: Any, params: Mapping[str, Any] | None = None,
              context: Mapping[str, Any] = CONTEXT) -> tuple[bytes, Any]:
    checked = kind.check_params(params or {})
    payload = kind.encode(value, checked, context=context)
    assert kind.encode(value, checked, context=context) == payload  # deterministic
    return payload, kind.decode(payload, checked)


def refused(kind: FieldType, value: Any, params: Mapping[str, Any] | None = None,
            context: Mapping[str, Any] = CONTEXT) -> FieldValueError:
    with pytest.raises(FieldValueError) as caught:
        kind.encode(value, kind.check_params(params or {}), context=context)
    return caught.value


def damaged(kind: FieldType, payload: bytes, params: Mapping[str, Any] | None = None) -> str:
    with pytest.raises(ValueError) as caught:
        kind.decode(payload, kind.check_params(params or {}))
    return str(caught.value)


# --- the table ---------------------------------------------------------------------------------

def test_builtin_types_are_named_field_types() -> None:
    assert sorted(BUILTIN_TYPES) == sorted(["image", "mask", "label", "labels", "boxes", "box_labels",
                                            "polygons", "text", "json", "ndarray", "bytes", "int", "float"])
    for name, cls in BUILTIN_TYPES.items():
        assert issubclass(cls, FieldType) and cls.name == name
    assert [n for n, c in BUILTIN_TYPES.items() if not c.in_record] == ["label"]
    assert MaskType.refers_to == {"image": "image"} and BoxesType.refers_to == {"image": "image"}
    assert BoxLabelsType.refers_to == {"boxes": "boxes"}


@pytest.mark.parametrize(("kind", "params"), [
    (ImageType(), {}), (ImageType(), {"codec": "jpeg", "codec_params": {"quality": 80}}),
    (MaskType(), {"image": "image", "classes": ["a", "b"]}), (MaskType(), {"image": "i", "dtype": "uint16"}),
    (LabelType(), {"classes": ["cat", "dog"]}), (LabelsType(), {}), (BoxesType(), {"image": "image"}),
    (BoxLabelsType(), {"boxes": "boxes", "classes": ["x"]}), (TextType(), {}), (JsonType(), {}),
    (NdarrayType(), {"dtype": ">f4", "shape": [None, 3]}), (BytesType(), {}), (IntType(), {}),
    (FloatType(), {}),
])
def test_check_params_fills_defaults_and_is_idempotent(kind: FieldType, params: dict[str, Any]) -> None:
    checked = kind.check_params(params)
    assert kind.check_params(checked) == checked  # what a manifest records reads back the same


def test_check_params_defaults() -> None:
    image = ImageType().check_params({})
    assert (image["codec"], image["check"]) == ("original", "full") and image["max_pixels"] > 0
    assert MaskType().check_params({"image": "im"}) == {
        "image": "im", "encoding": "png", "dtype": "uint8", "classes": [], "ignore": 255}
    assert MaskType().check_params({"image": "im", "dtype": "uint16"})["ignore"] == 65535
    assert BoxesType().check_params({"image": "im"}) == {
        "image": "im", "format": "xyxy", "normalized": False, "clip": True}
    assert TextType().check_params({}) == {"max_bytes": 1 << 20}
    assert NdarrayType().check_params({"dtype": ">f4"}) == {"dtype": "float32", "shape": None}


@pytest.mark.parametrize(("kind", "params", "words"), [
    (ImageType(), {"codek": "jpeg"}, ["'codek'", "codec", "codec_params"]),
    (ImageType(), {"codec": "webp"}, ["'codec'", "original", "jpeg", "pixels"]),
    (ImageType(), {"codec": "jpeg", "codec_params": {"speed": 3}}, ["codec_params", "speed"]),
    (ImageType(), {"check": "some"}, ["'check'", "full", "header", "none"]),
    (ImageType(), {"max_pixels": 0}, ["'max_pixels'"]),
    (MaskType(), {}, ["'image'"]),
    (MaskType(), {"image": "i", "encoding": "jpeg"}, ["'encoding'", "png", "raw"]),
    (MaskType(), {"image": "i", "dtype": "int8"}, ["'dtype'", "uint8", "uint16"]),
    (MaskType(), {"image": "i", "ignore": 256}, ["'ignore'", "255"]),
    (MaskType(), {"image": "i", "classes": [str(n) for n in range(257)]}, ["'classes'", "uint8"]),
    (LabelType(), {"classes": ["a", "a"]}, ["'classes'", "'a'"]),
    (LabelType(), {"classes": "ab"}, ["'classes'"]),
    (LabelsType(), {"classes": ["a", ""]}, ["'classes'"]),
    (BoxesType(), {"image": "i", "format": "yxyx"}, ["'format'", "xyxy", "xywh", "cxcywh"]),
    (BoxesType(), {"image": "i", "clip": "yes"}, ["'clip'"]),
    (BoxesType(), {"image": "i", "normalized": 1}, ["'normalized'"]),
    (BoxLabelsType(), {"classes": []}, ["'boxes'"]),
    (TextType(), {"max_bytes": -1}, ["'max_bytes'"]),
    (NdarrayType(), {}, ["'dtype'"]),
    (NdarrayType(), {"dtype": "object"}, ["'dtype'"]),
    (NdarrayType(), {"dtype": "U4"}, ["'dtype'"]),
    (NdarrayType(), {"dtype": "nonsense"}, ["'dtype'"]),
    (NdarrayType(), {"dtype": "uint8", "shape": [2, -1]}, ["'shape'"]),
    (NdarrayType(), {"dtype": "uint8", "shape": 3}, ["'shape'"]),
    (IntType(), {"max": 3}, ["'max'", "(none)"]),
])
def test_check_params_names_the_bad_param(kind: FieldType, params: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(ValueError) as caught:
        kind.check_params(params)
    for word in words:
        assert word in str(caught.value)


# --- image -------------------------------------------------------------------------------------

def test_image_original_keeps_the_bytes_and_gives_its_size() -> None:
    data = encoded(photo())
    payload, image = roundtrip(ImageType(), data)
    assert payload == data
    assert image.mode == "RGB" and np.array_equal(np.asarray(image), np.asarray(photo()))
    params = ImageType().check_params({})
    assert ImageType().context_of("img", data, payload, params) == {"img.size": (W, H)}


@pytest.mark.parametrize("codec", ["pixels", "jpeg"])
def test_image_other_codecs_store_their_own_bytes(codec: str) -> None:
    kind = ImageType()
    params = kind.check_params({"codec": codec, "codec_params": {"resize": 8}})
    payload = kind.encode(encoded(photo()), params, context={})
    assert kind.encode(encoded(photo()), params, context={}) == payload
    assert kind.decode(payload, params).size == (12, 8)
    assert kind.context_of("image", None, payload, params) == {"image.size": (12, 8)}


def test_image_refusals_keep_the_codecs_reason() -> None:
    assert refused(ImageType(), b"<html>not an image</html>").reason == "not_an_image"
    assert refused(ImageType(), encoded(photo())[:60]).reason == "truncated"
    assert refused(ImageType(), encoded(photo()), {"max_pixels": 100}).reason == "decompression_bomb"
    assert refused(ImageType(), "photo.jpg").reason == "invalid_value"
    assert refused(ImageType(), np.zeros((4, 4, 3), np.float32)).reason == "invalid_value"
    assert refused(ImageType(), np.zeros((4, 4, 2), np.uint8)).reason == "invalid_value"


@pytest.mark.parametrize("as_array", [False, True])
def test_a_pil_image_or_uint8_array_is_stored_losslessly(as_array: bool) -> None:
    value = np.asarray(photo()) if as_array else photo()
    params = ImageType().check_params({})
    payload = ImageType().encode(value, params, context={})
    assert payload.startswith(b"\x89PNG")
    assert np.array_equal(np.asarray(ImageType().decode(payload, params)), np.asarray(photo()))


def test_image_stored_unchecked_junk_has_no_size_and_decodes_as_damaged() -> None:
    params = ImageType().check_params({"check": "none"})
    payload = ImageType().encode(b"junk", params, context={})
    assert payload == b"junk" and ImageType().context_of("image", b"junk", payload, params) == {}
    assert refused(MaskType(), np.zeros((H, W), np.uint8), {"image": "image"}, context={}).reason \
        == "not_an_image"
    damaged(ImageType(), b"junk")
    damaged(ImageType(), b"PKPX", {"codec": "pixels"})


# --- mask --------------------------------------------------------------------------------------

def classes_mask(high: int = 5, dtype: Any = np.uint8) -> np.ndarray:
    return (np.arange(H * W).reshape(H, W) % high).astype(dtype)


@pytest.mark.parametrize("encoding", ["png", "raw"])
@pytest.mark.parametrize("dtype", ["uint8", "uint16"])
def test_mask_round_trips_exactly(encoding: str, dtype: str) -> None:
    mask = classes_mask(250, dtype) * (200 if dtype == "uint16" else 1)
    params = {"image": "image", "encoding": encoding, "dtype": dtype}
    payload, back = roundtrip(MaskType(), mask, params)
    assert back.dtype == np.dtype(dtype) and back.shape == (H, W) and np.array_equal(back, mask)
    if encoding == "png":
        assert Image.open(io.BytesIO(payload)).mode == ("L" if dtype == "uint8" else "I;16")
    else:
        assert len(payload) == 16 + H * W * np.dtype(dtype).itemsize


def test_mask_from_a_palette_png_keeps_its_indices() -> None:
    indices = classes_mask(21)
    indices[0, 0] = 255  # VOC's "void"
    palette = Image.frombytes("P", (W, H), indices.tobytes())
    palette.putpalette([v for n in range(256) for v in ((n * 37) % 256, (n * 91) % 256, (n * 13) % 256)])
    params = {"image": "image", "classes": [f"c{n}" for n in range(21)]}
    for value in (palette, encoded(palette)):
        _, back = roundtrip(MaskType(), value, params)
        assert np.array_equal(back, indices)


def test_mask_from_pil_images_of_each_mode() -> None:
    mask = classes_mask(7)
    _, back = roundtrip(MaskType(), Image.fromarray(mask), {"image": "image"})
    assert np.array_equal(back, mask)
    wide = classes_mask(7, np.uint16) * 9000
    _, back = roundtrip(MaskType(), Image.fromarray(wide), {"image": "image", "dtype": "uint16"})
    assert np.array_equal(back, wide)
    _, back = roundtrip(MaskType(), Image.fromarray(mask > 3), {"image": "image", "encoding": "raw"})
    assert np.array_equal(back, (mask > 3).astype(np.uint8))


def test_mask_of_another_size_is_refused_before_decoding() -> None:
    params = {"image": "image"}
    assert refused(MaskType(), np.zeros((H, W + 1), np.uint8), params).reason == "mask_size"
    assert refused(MaskType(), Image.new("L", (W, H + 1)), params).reason == "mask_size"
    assert refused(MaskType(), encoded(Image.new("L", (W - 1, H))), params).reason == "mask_size"
    error = refused(MaskType(), encoded(Image.new("L", (W, H))), params, context={"image.size": (W, H + 2)})
    assert error.reason == "mask_size" and f"{W}x{H}" in error.detail


def test_mask_values_outside_the_classes_are_refused() -> None:
    params = {"image": "image", "classes": ["bg", "cat", "dog"]}
    ok = classes_mask(3)
    ok[1, 1] = 255  # the ignore value
    roundtrip(MaskType(), ok, params)
    bad = classes_mask(3)
    bad[2, 3] = 7
    error = refused(MaskType(), bad, params)
    assert error.reason == "mask_value" and "[7]" in error.detail
    assert refused(MaskType(), ok, {**params, "ignore": None}).reason == "mask_value"
    assert refused(MaskType(), classes_mask(3, np.uint16) + 300, {"image": "image"}).reason == "mask_value"
    assert refused(MaskType(), classes_mask(3, np.int16) - 1, {"image": "image"}).reason == "mask_value"


@pytest.mark.parametrize("value", [Image.new("RGB", (W, H)), np.zeros((H, W, 3), np.uint8),
                                   np.zeros((H, W), np.float32), [[0] * W] * H, encoded(photo(), "BMP")])
def test_mask_values_that_are_no_mask(value: Any) -> None:
    assert refused(MaskType(), value, {"image": "image"}).reason == "invalid_value"


def test_mask_png_bytes_that_are_no_image() -> None:
    assert refused(MaskType(), b"\x89PNG junk", {"image": "image"}).reason in ("not_an_image", "truncated")


def test_damaged_raw_masks() -> None:
    params = {"image": "image", "encoding": "raw"}
    payload = MaskType().encode(classes_mask(), MaskType().check_params(params), context=CONTEXT)
    damaged(MaskType(), payload[:-1], params)
    damaged(MaskType(), payload[:10], params)
    damaged(MaskType(), b"XXXX" + payload[4:], params)
    damaged(MaskType(), payload, {**params, "dtype": "uint16"})
    huge = struct.pack("<4sB3xII", b"PKMK", 1, 1 << 31, 1 << 31) + b"\0" * 64  # no 4 EiB allocation
    assert "does not hold" in damaged(MaskType(), huge, params)


def _png_claiming(width: int, height: int, data: bytes) -> bytes:
    """``data`` (a PNG) with its IHDR size rewritten (and its CRC fixed)."""
    ihdr = bytearray(data[12:29])
    ihdr[4:12] = struct.pack(">II", width, height)
    return data[:12] + bytes(ihdr) + struct.pack(">I", zlib.crc32(bytes(ihdr))) + data[33:]


def test_damaged_png_masks() -> None:
    params = {"image": "image"}
    payload = MaskType().encode(classes_mask(), MaskType().check_params(params), context=CONTEXT)
    damaged(MaskType(), payload[: len(payload) // 2], params)
    damaged(MaskType(), b"junk", params)
    damaged(MaskType(), payload, {**params, "dtype": "uint16"})  # an L PNG is no uint16 mask
    assert "claims" in damaged(MaskType(), _png_claiming(60000, 60000, payload), params)


# --- label, labels -----------------------------------------------------------------------------

def test_label_round_trip_and_range() -> None:
    params = {"classes": ["cat", "dog", "emu"]}
    payload, back = roundtrip(LabelType(), np.int16(2), params)
    assert back == 2 and payload == (2).to_bytes(8, "little")
    assert refused(LabelType(), 3, params).reason == "missing_label"
    assert refused(LabelType(), -1, params).reason == "missing_label"
    assert refused(LabelType(), True, params).reason == "invalid_value"
    assert refused(LabelType(), "dog", params).reason == "invalid_value"
    assert roundtrip(LabelType(), 10**6)[1] == 10**6  # no class names: any index
    damaged(LabelType(), payload[:7], params)
    damaged(LabelType(), (9).to_bytes(8, "little"), params)


def test_labels_are_stored_distinct_and_sorted() -> None:
    params = {"classes": list("abcdef")}
    payload, back = roundtrip(LabelsType(), [5, 1, 3, 1], params)
    assert back.dtype == np.int64 and back.tolist() == [1, 3, 5]
    assert LabelsType().encode(np.array([3, 5, 1]), LabelsType().check_params(params), context={}) == payload
    assert roundtrip(LabelsType(), [], params)[1].tolist() == []
    assert refused(LabelsType(), [1, 6], params).reason == "missing_label"
    assert refused(LabelsType(), [1.5], params).reason == "invalid_value"
    assert refused(LabelsType(), "ab", params).reason == "invalid_value"
    damaged(LabelsType(), payload[:-1], params)
    damaged(LabelsType(), np.array([3, 1], "<i4").tobytes(), params)
    damaged(LabelsType(), np.array([1, 9], "<i4").tobytes(), params)


# --- boxes, box_labels -------------------------------------------------------------------------

BOXES = {"image": "image"}


@pytest.mark.parametrize(("fmt", "value"), [("xyxy", [[1, 2, 5, 6], [10.25, 3.5, 14, 5.5]]),
                                            ("xywh", [[1, 2, 5, 6], [10.25, 3.5, 4, 2]]),
                                            ("cxcywh", [[3, 4, 5, 6], [10.25, 3.5, 4, 2]])])
def test_boxes_round_trip_in_their_format(fmt: str, value: list[list[float]]) -> None:
    boxes = np.array(value, np.float32)
    payload, back = roundtrip(BoxesType(), boxes.tolist(), {**BOXES, "format": fmt})
    assert back.dtype == np.float32 and np.array_equal(back, boxes) and len(payload) == 32
    assert BoxesType().context_of("boxes", None, payload, {}) == {"boxes.count": 2}


@pytest.mark.parametrize("empty", [[], np.zeros((0, 4)), np.zeros((0,), np.float32)])
def test_no_boxes_at_all(empty: Any) -> None:
    payload, back = roundtrip(BoxesType(), empty, BOXES)
    assert payload == b"" and back.shape == (0, 4) and back.dtype == np.float32
    assert BoxesType().context_of("b", empty, payload, {}) == {"b.count": 0}


def test_clip_moves_only_the_coordinates_outside() -> None:
    boxes = [[-3, 2, 5, 6], [20, 10, 30, 20], [1.1, 1.3, 2.7, 2.9]]
    _, back = roundtrip(BoxesType(), boxes, BOXES)
    assert back.tolist() == [[0, 2, 5, 6], [20, 10, W, H], np.float32([1.1, 1.3, 2.7, 2.9]).tolist()]
    _, back = roundtrip(BoxesType(), [[20, 12, 10, 10]], {**BOXES, "format": "cxcywh"})
    assert back.tolist() == [[19.5, 11.5, 9, 9]]  # corners 15..25 x 7..17 clipped to 15..24 x 7..16
    _, back = roundtrip(BoxesType(), [[0.5, 0.5, 0.6, 0.2]], {**BOXES, "format": "xywh", "normalized": True})
    assert np.allclose(back, [[0.5, 0.5, 0.5, 0.2]])


def test_out_of_image_boxes_without_clip_are_refused() -> None:
    params = {**BOXES, "clip": False}
    roundtrip(BoxesType(), [[0, 0, W, H]], params)  # the whole image is inside
    error = refused(BoxesType(), [[0, 0, 2, 2], [1, 1, W + 0.5, 3]], params)
    assert error.reason == "box_outside" and "box 1" in error.detail
    normalized = {**params, "normalized": True}
    assert refused(BoxesType(), [[0.2, 0.2, 0.9, 1.1]], normalized).reason == "box_outside"


def test_degenerate_boxes_make_the_sample_a_skip() -> None:
    assert refused(BoxesType(), [[1, 1, 5, 5], [3, 3, 3, 8]], BOXES).reason == "degenerate_box"
    assert refused(BoxesType(), [[5, 1, 1, 5]], BOXES).reason == "degenerate_box"  # corners swapped
    assert refused(BoxesType(), [[1, 1, 0, 4]], {**BOXES, "format": "xywh"}).reason == "degenerate_box"
    error = refused(BoxesType(), [[30, 1, 40, 5]], BOXES)  # wholly outside: nothing left once clipped
    assert error.reason == "degenerate_box" and "inside the image" in error.detail


@pytest.mark.parametrize("value", [[[1, 2, 3]], [[1, 2, 3, math.nan]], [[1, 2, 3, math.inf]],
                                   [["1", "2", "3", "4"]], [[1, 2], [3, 4, 5, 6]], 7, "boxes"])
def test_values_that_are_no_boxes(value: Any) -> None:
    assert refused(BoxesType(), value, BOXES).reason == "invalid_value"


def test_damaged_boxes() -> None:
    payload = BoxesType().encode([[1, 2, 3, 4]], BoxesType().check_params(BOXES), context=CONTEXT)
    damaged(BoxesType(), payload[:-1], BOXES)
    damaged(BoxesType(), np.array([[1, 2, np.nan, 4]], "<f4").tobytes(), BOXES)


@settings(max_examples=60, deadline=None)
@given(fmt=st.sampled_from(["xyxy", "xywh", "cxcywh"]),
       corners=st.lists(st.tuples(*[st.integers(0, 4 * W) for _ in range(4)]), max_size=12))
def test_boxes_inside_round_trip_exactly(fmt: str, corners: list[tuple[int, int, int, int]]) -> None:
    """Boxes on a quarter-pixel grid inside the image: stored and read back unchanged."""
    inside = [(min(a, c) / 4, min(b, d) / 4 * H / W, (max(a, c) + 1) / 4, (max(b, d) + 1) / 4 * H / W)
              for a, b, c, d in corners if max(a, c) < 4 * W - 1 and max(b, d) < 4 * W - 1]
    xyxy = np.array(inside, np.float64).reshape(-1, 4)
    x1, y1, x2, y2 = xyxy.T
    value = {"xyxy": xyxy, "xywh": np.stack([x1, y1, x2 - x1, y2 - y1], 1),
             "cxcywh": np.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], 1)}[fmt]
    value = value.astype(np.float32)
    _, back = roundtrip(BoxesType(), value, {**BOXES, "format": fmt})
    assert np.array_equal(back, value)


def test_box_labels_match_their_boxes() -> None:
    params = {"boxes": "boxes", "classes": ["car", "bus", "tram"]}
    payload, back = roundtrip(BoxLabelsType(), [2, 0], params)
    assert back.dtype == np.int64 and back.tolist() == [2, 0]  # box order kept
    assert len(payload) == 8
    error = refused(BoxLabelsType(), [2, 0, 1], params)
    assert error.reason == "box_count" and "3 box labels for 2 boxes" in error.detail
    assert refused(BoxLabelsType(), [], params).reason == "box_count"
    assert roundtrip(BoxLabelsType(), [], params, context={"boxes.count": 0})[1].shape == (0,)
    assert refused(BoxLabelsType(), [1, 3], params).reason == "missing_label"
    assert refused(BoxLabelsType(), [1, 1], params, context={}).reason == "box_count"
    damaged(BoxLabelsType(), payload[:-2], params)
    damaged(BoxLabelsType(), np.array([5], "<i4").tobytes(), params)


# --- text, json --------------------------------------------------------------------------------

def test_text() -> None:
    caption = "a café\0 \U0001f408 on a mat"
    payload, back = roundtrip(TextType(), caption)
    assert back == caption and payload == caption.encode("utf-8")
    assert roundtrip(TextType(), "")[1] == ""
    error = refused(TextType(), "x" * 11, {"max_bytes": 10})
    assert error.reason == "too_large" and "11 bytes" in error.detail
    assert refused(TextType(), "lone \ud800 surrogate").reason == "invalid_value"
    assert refused(TextType(), b"bytes").reason == "invalid_value"
    damaged(TextType(), b"\xff\xfe")
    damaged(TextType(), b"x" * 11, {"max_bytes": 10})


def test_json_is_canonical() -> None:
    value = {"b": [1, 2.5, None, True], "a": {"z": "é", "y": []}}
    payload, back = roundtrip(JsonType(), value)
    assert back == value and payload == '{"a":{"y":[],"z":"é"},"b":[1,2.5,null,true]}'.encode()
    reordered = {"a": {"y": [], "z": "é"}, "b": [1, 2.5, None, True]}
    assert JsonType().encode(reordered, JsonType().check_params({}), context={}) == payload
    assert roundtrip(JsonType(), (1, 2))[1] == [1, 2]


@pytest.mark.parametrize("value", [math.nan, {"x": math.inf}, {1, 2}, object(), {"a": 1, 2: "b"}, b"raw"])
def test_json_refuses_what_is_no_json(value: Any) -> None:
    assert refused(JsonType(), value).reason == "invalid_value"


def test_json_limits_and_damage() -> None:
    assert refused(JsonType(), "x" * 20, {"max_bytes": 10}).reason == "too_large"
    for payload in (b"NaN", b'{"a":', b"\xff", b"[" * 100_000 + b"]" * 100_000, b'[1, -Infinity]'):
        damaged(JsonType(), payload)


# --- ndarray -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("array", "params"), [
    (np.arange(12, dtype=np.float32).reshape(3, 4), {"dtype": "float32", "shape": [3, 4]}),
    (np.arange(6, dtype=">i4").reshape(2, 3), {"dtype": "int32", "shape": [None, 3]}),
    (np.zeros((0, 3), np.uint16), {"dtype": "uint16", "shape": [None, 3]}),
    (np.array(7, np.int64), {"dtype": "int64", "shape": []}),
    (np.array([True, False]), {"dtype": "bool"}),
    (np.array([1 + 2j]), {"dtype": "complex64"}),
    (np.ones((2, 1, 2, 1)), {"dtype": "float64"}),
])
def test_ndarray_round_trips(array: np.ndarray, params: dict[str, Any]) -> None:
    payload, back = roundtrip(NdarrayType(), array, params)
    assert back.dtype == np.dtype(params["dtype"]) and back.shape == array.shape
    assert np.array_equal(back, array) and back.flags.writeable


def test_ndarray_is_little_endian_and_c_order() -> None:
    array = np.arange(6, dtype=">u2").reshape(2, 3).T  # big-endian, Fortran-ordered view
    payload, _ = roundtrip(NdarrayType(), array, {"dtype": "uint16"})
    assert payload == struct.pack("<IQQ", 2, 3, 2) + np.ascontiguousarray(array, "<u2").tobytes()


def test_ndarray_casts_only_without_changing_values() -> None:
    assert roundtrip(NdarrayType(), [[1, 2], [3, 4]], {"dtype": "uint8"})[1].tolist() == [[1, 2], [3, 4]]
    widened = roundtrip(NdarrayType(), np.arange(3, dtype=np.int8), {"dtype": "float32"})[1]
    assert widened.tolist() == [0, 1, 2]
    assert refused(NdarrayType(), [300], {"dtype": "uint8"}).reason == "invalid_value"
    assert refused(NdarrayType(), [0.1], {"dtype": "float32"}).reason == "invalid_value"
    assert refused(NdarrayType(), [1 + 1j], {"dtype": "float64"}).reason == "invalid_value"
    assert refused(NdarrayType(), ["a"], {"dtype": "uint8"}).reason == "invalid_value"
    assert refused(NdarrayType(), [[1], [2, 3]], {"dtype": "uint8"}).reason == "invalid_value"


def test_ndarray_shape_is_checked() -> None:
    params = {"dtype": "uint8", "shape": [None, 3]}
    assert refused(NdarrayType(), np.zeros((2, 4), np.uint8), params).reason == "invalid_value"
    assert refused(NdarrayType(), np.zeros((2, 3, 1), np.uint8), params).reason == "invalid_value"


def test_damaged_ndarrays_allocate_nothing_big() -> None:
    params = {"dtype": "float64"}
    payload = NdarrayType().encode(np.ones((4, 5)), NdarrayType().check_params(params), context={})
    damaged(NdarrayType(), payload[:-1], params)
    damaged(NdarrayType(), payload[:3], params)
    damaged(NdarrayType(), payload[:12], params)
    huge = struct.pack("<IQQ", 2, 1 << 40, 1 << 40) + payload[20:]
    assert "does not fit" in damaged(NdarrayType(), huge, params)
    assert "dimensions" in damaged(NdarrayType(), struct.pack("<I", 1 << 30) + payload[4:], params)
    damaged(NdarrayType(), payload, {"dtype": "float64", "shape": [5, 4]})
    damaged(NdarrayType(), struct.pack("<IQ", 1, 2) + b"\x00\x02", {"dtype": "bool"})


@settings(max_examples=60, deadline=None)
@given(array=hnp.arrays(st.sampled_from([np.uint8, np.int16, np.float32, np.float64, np.bool_]),
                        hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)))
def test_ndarray_round_trips_any_shape(array: np.ndarray) -> None:
    params = {"dtype": array.dtype.name, "shape": [None] * array.ndim}
    _, back = roundtrip(NdarrayType(), array, params)
    assert back.shape == array.shape and np.array_equal(back, array, equal_nan=array.dtype.kind == "f")


# --- bytes, int, float -------------------------------------------------------------------------

def test_bytes() -> None:
    assert roundtrip(BytesType(), bytearray(b"\0\xff"))[1] == b"\0\xff"
    assert refused(BytesType(), "text").reason == "invalid_value"


def test_int() -> None:
    payload, back = roundtrip(IntType(), -(1 << 63))
    assert back == -(1 << 63) and payload == struct.pack("<q", -(1 << 63))
    assert roundtrip(IntType(), np.uint32(7))[1] == 7
    assert refused(IntType(), 1 << 63).reason == "invalid_value"
    assert refused(IntType(), 1.0).reason == "invalid_value"
    assert refused(IntType(), False).reason == "invalid_value"
    damaged(IntType(), b"\0" * 7)


def test_float() -> None:
    assert roundtrip(FloatType(), 0.1)[1] == 0.1
    assert roundtrip(FloatType(), 3)[1] == 3.0 and roundtrip(FloatType(), np.float32(0.5))[1] == 0.5
    assert roundtrip(FloatType(), -math.inf)[1] == -math.inf
    nan_bits = [struct.unpack("<d", struct.pack("<Q", bits))[0]
                for bits in (0x7FF8000000000001, 0xFFF8000000000000)]
    payloads = {FloatType().encode(nan, {}, context={}) for nan in [*nan_bits, math.nan, float("nan")]}
    assert len(payloads) == 1 and math.isnan(FloatType().decode(payloads.pop(), {}))
    assert refused(FloatType(), "1.0").reason == "invalid_value"
    assert refused(FloatType(), True).reason == "invalid_value"
    assert refused(FloatType(), 10**400).reason == "invalid_value"
    damaged(FloatType(), b"\0" * 9)
