"""Which fields of a sample move with the image: :class:`Targets`, given by name or read from a
dataset's schema (:func:`targets_for_schema`: every mask and boxes field tied to the image, and
every ``box_labels`` and ``polygons`` field tied to those boxes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from packer.format.fields.schema import Schema

__all__ = ["BoxField", "OutlineField", "Targets", "targets_for_schema"]

_FORMATS = ("xyxy", "xywh", "cxcywh")


@dataclass(frozen=True)
class BoxField:
    """A boxes field: its ``format`` (xyxy, xywh, cxcywh), whether it is ``normalized`` to
    [0, 1], and the per-box fields (``rows``, e.g. ``("box_labels",)``) whose rows go with it."""

    format: str = "xyxy"
    normalized: bool = False
    rows: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.format not in _FORMATS:
            raise ValueError(f"box format must be one of {', '.join(_FORMATS)}, not {self.format!r}")
        if isinstance(self.rows, str):
            raise TypeError(f"rows must be a sequence of field names, not the str {self.rows!r}")
        object.__setattr__(self, "rows", tuple(self.rows))


@dataclass(frozen=True)
class OutlineField:
    """A ``polygons`` field: the ``boxes`` field whose boxes its entries outline, and whether its
    coordinates are ``normalized`` to [0, 1]."""

    boxes: str
    normalized: bool = False


@dataclass(frozen=True)
class Targets:
    """The image field and the fields that move with it (see the module docstring)."""

    image: str = "image"
    masks: tuple[str, ...] = ()
    boxes: Mapping[str, BoxField] = field(default_factory=dict)
    outlines: Mapping[str, OutlineField] = field(default_factory=dict)

    @classmethod
    def of(cls, image: str, masks: Sequence[str], boxes: Mapping[str, BoxField | Sequence[str]],
           outlines: Mapping[str, OutlineField | str] | None = None) -> Targets:
        """Targets from names; a boxes entry may be a :class:`BoxField` or just its row fields
        (then xyxy pixels), an outlines entry an :class:`OutlineField` or its boxes' name (pixels).

        Raises:
            ValueError: an outlines field names boxes that are not among ``boxes``.
        """
        if isinstance(masks, str):
            raise TypeError(f"masks must be a sequence of field names, not the str {masks!r}")
        bound = {name: spec if isinstance(spec, BoxField) else BoxField(rows=tuple(spec))
                 for name, spec in boxes.items()}
        shapes = {name: spec if isinstance(spec, OutlineField) else OutlineField(spec)
                  for name, spec in (outlines or {}).items()}
        for name, spec in shapes.items():
            if spec.boxes not in bound:
                raise ValueError(f"outlines field {name!r} follows the boxes {spec.boxes!r}, which are not "
                                 f"among the boxes moved ({', '.join(bound) or 'none'})")
        return cls(image, tuple(masks), bound, shapes)


def targets_for_schema(schema: Schema, image: str = "image") -> Targets:
    """The targets of ``image`` in ``schema``: its masks, its boxes (their format and
    normalisation as recorded), their ``box_labels`` and their ``polygons``.

    Raises:
        KeyError: ``schema`` has no field ``image``; ValueError: it is not an image field.
    """
    if schema[image].type != "image":
        raise ValueError(f"field {image!r} is a {schema[image].type}, not an image")
    masks = tuple(f.name for f in schema if f.type == "mask" and f.params.get("image") == image)
    boxes: dict[str, Any] = {}
    for f in schema:
        if f.type == "boxes" and f.params.get("image") == image:
            rows = tuple(g.name for g in schema if g.type == "box_labels" and g.params.get("boxes") == f.name)
            boxes[f.name] = BoxField(f.params.get("format", "xyxy"), bool(f.params.get("normalized", False)),
                                     rows)
    outlines = {f.name: OutlineField(f.params["boxes"], bool(f.params.get("normalized", False)))
                for f in schema if f.type == "polygons" and f.params.get("boxes") in boxes}
    return Targets(image, masks, boxes, outlines)
