"""A sample's values become one record by its schema and come back field for field; an
ImageFolder conversion goes through the same encoder and still stores the codec's output itself."""

from __future__ import annotations

import numpy as np
import pytest
from imagetools import jpeg_bytes, png_bytes

from packer.format.codecs import get_codec
from packer.format.fields.base import FieldValueError
from packer.format.fields.encoding import SampleDecoder, SampleEncoder
from packer.format.fields.schema import Schema
from packer.format.fields.types.images import ImageType

SEGMENTATION_AND_BOXES = Schema.of([
    {"name": "image", "type": "image"},
    {"name": "mask", "type": "mask", "params": {"image": "image", "classes": ["bg", "cat", "dog"]}},
    {"name": "boxes", "type": "boxes", "params": {"image": "image"}},
    {"name": "box_labels", "type": "box_labels", "params": {"boxes": "boxes", "classes": ["cat", "dog"]}},
    {"name": "caption", "type": "text"},
    {"name": "label", "type": "label", "params": {"classes": ["indoor", "outdoor"]}},
])


def _sample(width: int = 16, height: int = 12) -> dict[str, object]:
    mask = np.zeros((height, width), np.uint8)
    mask[2:6, 3:9] = 1
    mask[7:, :4] = 2
    return {"image": png_bytes(width, height, seed=3), "mask": mask,
            "boxes": [[3, 2, 9, 6], [0, 7, 4, 12]], "box_labels": [0, 1], "caption": "two animals, é",
            "label": 1}


def test_a_sample_round_trips_field_for_field() -> None:
    record = SampleEncoder(SEGMENTATION_AND_BOXES).encode(_sample())
    assert record == SampleEncoder(SEGMENTATION_AND_BOXES).encode(_sample())  # deterministic
    values = SampleDecoder(SEGMENTATION_AND_BOXES).decode(record)
    assert list(values) == ["image", "mask", "boxes", "box_labels", "caption"]  # label: sample index
    assert values["image"].size == (16, 12)
    assert np.array_equal(values["mask"], _sample()["mask"])
    assert values["boxes"].dtype == np.float32 and values["boxes"].tolist() == [[3, 2, 9, 6], [0, 7, 4, 12]]
    assert values["box_labels"].tolist() == [0, 1] and values["caption"] == "two animals, é"


def test_fields_can_be_chosen_ordered_and_left_raw() -> None:
    record = SampleEncoder(SEGMENTATION_AND_BOXES).encode(_sample())
    chosen = SampleDecoder(SEGMENTATION_AND_BOXES).decode(record, ("caption", "image"),
                                                          raw=frozenset({"image"}))
    assert list(chosen) == ["caption", "image"] and chosen["image"] == png_bytes(16, 12, seed=3)
    with pytest.raises(KeyError):
        SampleDecoder(SEGMENTATION_AND_BOXES).decode(record, ("label",))


@pytest.mark.parametrize("change, reason", [
    ({"mask": np.zeros((12, 15), np.uint8)}, "mask_size"),
    ({"mask": np.full((12, 16), 7, np.uint8)}, "mask_value"),
    ({"boxes": [[3, 2, 3, 6], [0, 7, 4, 12]]}, "degenerate_box"),
    ({"box_labels": [0]}, "box_count"),
    ({"image": b"not an image"}, "not_an_image"),
])
def test_a_value_that_does_not_fit_skips_the_sample(change: dict[str, object], reason: str) -> None:
    with pytest.raises(FieldValueError) as caught:
        SampleEncoder(SEGMENTATION_AND_BOXES).encode({**_sample(), **change})
    assert caught.value.reason == reason


def test_a_missing_value_is_named() -> None:
    sample = _sample()
    del sample["caption"]
    with pytest.raises(FieldValueError, match="no value for field 'caption'"):
        SampleEncoder(SEGMENTATION_AND_BOXES).encode(sample)


def test_a_damaged_record_is_a_value_error() -> None:
    record = SampleEncoder(SEGMENTATION_AND_BOXES).encode(_sample())
    with pytest.raises(ValueError):
        SampleDecoder(SEGMENTATION_AND_BOXES).decode(record[:-3])


@pytest.mark.parametrize("codec", ["original", "jpeg", "pixels"])
def test_an_imagefolder_record_is_the_codec_s_output(codec: str) -> None:
    bound = get_codec(codec)
    schema = Schema.of([{"name": "image", "type": "image", "params": {"codec": codec}}])
    data = jpeg_bytes(20, 10, seed=1)
    record = SampleEncoder(schema, bound={"image": ImageType(bound)}).encode({"image": data})
    assert record == bound.encode(data, check="full", max_pixels=10**8)
    if codec == "original":
        assert record is data  # stored untouched: not even copied
