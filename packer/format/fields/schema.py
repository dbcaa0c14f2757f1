"""A dataset's schema: the named, typed fields every sample holds, recorded in the manifest.

An ImageFolder dataset is the schema ``{image, label}`` (:func:`imagefolder_schema`), read
exactly as packer always read it; a manifest without a schema means that one. Other datasets
record theirs (``extra.schema``) and have format version 3, which older packers refuse to read
rather than misread. Field names are keys of a sample dict and of the record layout, so they are
checked here once: lower-case identifiers, unique, at most one class ``label``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from packer.errors import SchemaError
from packer.format.fields.base import FieldType
from packer.format.fields.registry import field_type

__all__ = ["Field", "Schema", "imagefolder_schema"]

_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,63}")
#: The most fields one sample may have (a record's header holds one length per field).
MAX_FIELDS: Final = 64


@dataclass(frozen=True)
class Field:
    """One field: its ``name`` (a sample dict's key), its ``type`` name and validated ``params``."""

    name: str
    type: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def kind(self) -> FieldType:
        """The registered :class:`FieldType` this field's values are checked and stored by."""
        return field_type(self.type)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "params": dict(self.params)}


@dataclass(frozen=True)
class Schema:
    """The ordered fields of every sample. Build it with :meth:`of`, which checks it."""

    fields: tuple[Field, ...]

    @classmethod
    def of(cls, fields: Sequence[Field | Mapping[str, Any]]) -> Schema:
        """A checked schema: names valid and unique, types registered, params validated (defaults
        filled in), every reference (a mask's ``image``) naming an earlier field of the right type.

        Raises:
            SchemaError: what is wrong, naming the field.
        """
        if not fields:
            raise SchemaError("A schema needs at least one field (an image, say).")
        if len(fields) > MAX_FIELDS:
            raise SchemaError(f"A schema holds at most {MAX_FIELDS} fields, not {len(fields)}.")
        checked: list[Field] = []
        for given in fields:
            spec = given if isinstance(given, Field) else _field_from(given)
            checked.append(_checked(spec, checked))
        if sum(f.type == "label" for f in checked) > 1:
            raise SchemaError("A schema has at most one 'label' field (the class index every sampler "
                              "and `targets` use); give other class indices the type 'int' or 'labels'.")
        return cls(tuple(checked))

    @classmethod
    def from_list(cls, data: Any, *, source: str = "<schema>") -> Schema:
        """The schema a manifest recorded (``to_list()``'s form).

        Raises:
            SchemaError: malformed; the message names ``source``.
        """
        if not isinstance(data, list):
            raise SchemaError(f"{source}: the schema should be a list of fields, not {type(data).__name__}")
        try:
            return cls.of(data)
        except SchemaError as err:
            raise SchemaError(f"{source}: {err}") from err

    def to_list(self) -> list[dict[str, Any]]:
        """The JSON form the manifest records."""
        return [f.to_dict() for f in self.fields]

    def __iter__(self) -> Iterator[Field]:
        return iter(self.fields)

    def __getitem__(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"no field {name!r}; the fields are {', '.join(self.names())}")

    def names(self) -> tuple[str, ...]:
        """The field names, in order."""
        return tuple(f.name for f in self.fields)

    def in_record(self) -> tuple[Field, ...]:
        """The fields stored in each sample's record, in record order."""
        return tuple(f for f in self.fields if f.kind().in_record)

    def label_field(self) -> Field | None:
        """The class ``label`` field (its values are the sample index's targets), if any."""
        return next((f for f in self.fields if f.type == "label"), None)

    def is_imagefolder(self) -> bool:
        """True for ``{image, label}``: records are the image's stored bytes, as always."""
        return [(f.name, f.type) for f in self.fields] == [("image", "image"), ("label", "label")]


def imagefolder_schema(codec: str = "original", codec_params: Mapping[str, Any] | None = None,
                       classes: Sequence[str] = (), *, check: str | None = None,
                       max_pixels: int | None = None) -> Schema:
    """The schema of an ImageFolder dataset: an image stored by ``codec`` (checked at ``check``
    within ``max_pixels``, the conversion's; the type's defaults when None) and its class label."""
    image: dict[str, Any] = {"codec": codec, "codec_params": dict(codec_params or {})}
    image.update({k: v for k, v in (("check", check), ("max_pixels", max_pixels)) if v is not None})
    return Schema.of([Field("image", "image", image), Field("label", "label", {"classes": list(classes)})])


def _field_from(data: Any) -> Field:
    if not isinstance(data, Mapping) or not isinstance(data.get("name"), str) \
            or not isinstance(data.get("type"), str):
        raise SchemaError(f"A field is a mapping with a 'name' and a 'type' (and 'params'), not {data!r}")
    unknown = set(data) - {"name", "type", "params"}
    if unknown:
        raise SchemaError(f"field {data['name']!r}: unknown keys {sorted(unknown)} (name, type, params)")
    params = data.get("params") or {}
    if not isinstance(params, Mapping):
        raise SchemaError(f"field {data['name']!r}: params should be a mapping, not {type(params).__name__}")
    return Field(data["name"], data["type"], dict(params))


def _checked(spec: Field, earlier: Sequence[Field]) -> Field:
    """``spec`` with its name checked and its params validated against its type and ``earlier``."""
    if not isinstance(spec.name, str) or not _NAME.fullmatch(spec.name):
        raise SchemaError(f"field name {spec.name!r}: use a lower-case identifier (a-z, 0-9, _), at "
                          "most 64 characters")
    if any(f.name == spec.name for f in earlier):
        raise SchemaError(f"field name {spec.name!r} is given twice")
    kind = field_type(spec.type)
    try:
        params = kind.check_params(spec.params)
    except ValueError as err:
        raise SchemaError(f"field {spec.name!r} ({spec.type}): {err}") from err
    for param, wanted in kind.refers_to.items():
        target = params.get(param)
        match = next((f for f in earlier if f.name == target), None)
        if match is None or match.type != wanted:
            raise SchemaError(f"field {spec.name!r} ({spec.type}): {param}={target!r} should name an "
                              f"earlier field of type {wanted!r}")
        image = match if wanted == "image" else next(  # or the image of the boxes an outline follows
            (f for f in earlier if f.type == "image" and f.name == match.params.get("image")), None)
        if image is not None and kind.in_image_pixels(params):
            _refuse_resized(spec, image)
    return Field(spec.name, spec.type, params)


def _refuse_resized(spec: Field, image: Field) -> None:
    """A field in ``image``'s pixels cannot follow a codec that stores the image resized: its
    values would silently stop fitting (boxes outside, masks of another size), so refuse."""
    resize = (image.params.get("codec_params") or {}).get("resize")
    if resize is None:
        return
    raise SchemaError(
        f"field {spec.name!r} ({spec.type}) is measured in the pixels of the image field "
        f"{image.name!r}, which codec {image.params.get('codec')!r} would store resized "
        f"(resize={resize}), so its values would no longer fit the stored image. Store the images "
        "at full size (no resize; the joint transforms resize image, masks and boxes together while "
        f"loading){', or give the boxes normalised to [0, 1]' if 'normalized' in spec.params else ''}.")
