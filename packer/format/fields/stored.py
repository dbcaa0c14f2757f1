"""What readers other than the datasets take from a stored record: its image, or every field.

The tools (``show``, ``verify --deep``, ``preview``, ``bench``) decode a sample's image with the
dataset's codec. In an ImageFolder dataset the record *is* the image's stored bytes; in a
dataset with fields the image is one payload of the record. :func:`image_payload` gives it in
both cases, so a tool never mistakes a record for an image file.
"""

from __future__ import annotations

from packer.format.codecs import get_codec
from packer.format.fields.encoding import SampleDecoder
from packer.format.fields.record import unpack_record
from packer.format.fields.schema import Field, Schema
from packer.format.fields.types.images import ImageType

__all__ = ["first_image_field", "image_payload", "stored_decoder", "tied_field"]


def first_image_field(schema: Schema) -> Field | None:
    """The schema's first ``image`` field (the one tools show and time), or None."""
    return next((f for f in schema if f.type == "image"), None)


def tied_field(schema: Schema, kind: str, to: Field | None, param: str = "image") -> Field | None:
    """The first field of type ``kind`` whose ``param`` names the field ``to`` (the mask or the
    boxes of an image, the box labels of boxes), or None (also when ``to`` is None)."""
    if to is None:
        return None
    return next((f for f in schema if f.type == kind and f.params.get(param) == to.name), None)


def image_payload(schema: Schema, record: bytes | memoryview) -> bytes:
    """The stored bytes of the record's first image field (the record itself when the record
    holds that one field, as an ImageFolder dataset's does).

    Raises:
        ValueError: the schema has no image field, or the record does not hold its fields.
    """
    image = first_image_field(schema)
    if image is None:
        raise ValueError(f"the dataset's samples have no image field (fields: {', '.join(schema.names())})")
    stored = schema.in_record()
    payloads = unpack_record(record, len(stored))
    return bytes(payloads[[f.name for f in stored].index(image.name)])


def stored_decoder(schema: Schema) -> SampleDecoder:
    """A decoder of the schema's records, each image field bound to the codec it was stored by."""
    bound = {f.name: ImageType(get_codec(f.params["codec"], f.params["codec_params"]))
             for f in schema if f.type == "image"}
    return SampleDecoder(schema, bound=bound)
