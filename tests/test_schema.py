"""Sample schemas: checked once (names, types, params, references), recorded as JSON and read
back equal; an ImageFolder dataset is the schema {image, label}."""

from __future__ import annotations

import json
from typing import Any

import pytest

from packer.errors import SchemaError, UnknownNameError
from packer.format.fields.registry import field_type_names
from packer.format.fields.schema import Field, Schema, imagefolder_schema

DETECTION = [
    {"name": "image", "type": "image", "params": {"codec": "original"}},
    {"name": "boxes", "type": "boxes", "params": {"image": "image", "format": "xywh"}},
    {"name": "box_labels", "type": "box_labels", "params": {"boxes": "boxes", "classes": ["cat", "dog"]}},
    {"name": "caption", "type": "text"},
]


def test_every_issue_27_type_is_registered() -> None:
    assert {"image", "mask", "label", "labels", "boxes", "box_labels", "text", "json", "ndarray",
            "bytes", "int", "float"} <= set(field_type_names())


def test_a_schema_round_trips_through_its_json_form() -> None:
    schema = Schema.of(DETECTION)
    again = Schema.from_list(json.loads(json.dumps(schema.to_list())))
    assert again == schema
    assert schema.names() == ("image", "boxes", "box_labels", "caption")
    assert schema["boxes"].params["format"] == "xywh"  # given
    assert "normalized" in schema["boxes"].params  # a default, filled in and recorded
    assert schema.label_field() is None and not schema.is_imagefolder()
    assert [f.name for f in schema.in_record()] == ["image", "boxes", "box_labels", "caption"]


def test_the_imagefolder_schema() -> None:
    schema = imagefolder_schema("jpeg", {"quality": 90}, ["ant", "bee"])
    assert schema.is_imagefolder()
    assert schema.label_field() == schema["label"] and schema["label"].params["classes"] == ["ant", "bee"]
    assert [f.name for f in schema.in_record()] == ["image"]  # the label lives in the sample index
    checked = imagefolder_schema("original", check="header", max_pixels=1000)["image"].params
    assert (checked["check"], checked["max_pixels"]) == ("header", 1000)  # the conversion's checks


@pytest.mark.parametrize("fields, message", [
    ([], "at least one field"),
    ([{"name": "Image", "type": "image"}], "lower-case identifier"),
    ([{"name": "a/b", "type": "image"}], "lower-case identifier"),
    ([{"name": "image", "type": "image"}, {"name": "image", "type": "text"}], "given twice"),
    ([{"name": "mask", "type": "mask", "params": {"image": "image"}}], "earlier field of type 'image'"),
    ([{"name": "t", "type": "text"}, {"name": "m", "type": "mask", "params": {"image": "t"}}],
     "earlier field of type 'image'"),
    ([{"name": "a", "type": "label"}, {"name": "b", "type": "label"}], "at most one 'label'"),
    ([{"name": "image", "type": "image", "params": {"codec": "nope"}}], "image"),
    ([{"name": "x", "type": "text", "extra": 1}], "unknown keys"),
    ([{"name": "x"}], "a 'name' and a 'type'"),
    ([{"name": "x", "type": "text", "params": [1]}], "params should be a mapping"),
])
def test_bad_schemas_say_what_is_wrong(fields: list[Any], message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        Schema.of(fields)


def test_an_unknown_type_lists_the_known_ones() -> None:
    with pytest.raises(UnknownNameError, match="boxes"):
        Schema.of([Field("x", "polygon")])


def test_a_damaged_recorded_schema_names_its_source() -> None:
    with pytest.raises(SchemaError, match="index.json: the schema should be a list"):
        Schema.from_list({"image": "image"}, source="index.json")
    with pytest.raises(SchemaError, match="index.json: field name"):
        Schema.from_list([{"name": "../x", "type": "text"}], source="index.json")


def _resized(codec_params: dict[str, Any], *fields: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "image", "type": "image", "params": {"codec": "pixels", "codec_params": codec_params}},
            *fields]


@pytest.mark.parametrize("field", [
    {"name": "boxes", "type": "boxes", "params": {"image": "image", "format": "xywh"}},
    {"name": "mask", "type": "mask", "params": {"image": "image", "classes": ["bg", "fg"]}},
])
def test_fields_in_an_image_s_pixels_refuse_a_resizing_codec(field: dict[str, Any]) -> None:
    with pytest.raises(SchemaError, match=rf"field '{field['name']}' .* pixels of the image field 'image'.*"
                                          r"resize=64.*full size"):
        Schema.of(_resized({"resize": 64}, field))
    # the same field over an image stored at full size is fine
    assert Schema.of(_resized({}, field))[field["name"]].type == field["type"]


def test_normalised_boxes_follow_a_resized_image() -> None:
    boxes = {"name": "boxes", "type": "boxes", "params": {"image": "image", "normalized": True}}
    assert Schema.of(_resized({"resize": 64}, boxes))["boxes"].params["normalized"] is True
