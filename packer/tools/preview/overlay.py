"""Boxes with their labels, and masks as coloured overlays, on a contact sheet's thumbnails.

People would rather look than read: a sheet of a dataset with fields draws, on each thumbnail,
the mask tied to its image (each class in its own colour, half transparent; class 0, taken as
background, and the mask's ``ignore`` value left clear) and the boxes tied to it, outlined in
their class's colour with the class name (or number) above each. Colours depend only on the class
index, so a class looks the same on every sheet. A ``polygons`` field tied to those boxes (COCO's
segmentation, YOLO's segments) is drawn too: each ring filled half transparent in its box's colour
and outlined (a crowd's RLE is painted as a mask where pycocotools imports, else left to its box).
Fields of other kinds (captions, JSON) are not drawn.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from packer.format.fields.schema import Schema
from packer.format.fields.stored import first_image_field, stored_decoder, tied_field
from packer.format.fields.types.targets import as_xyxy
from packer.tools.preview.outlines import paint_outlines

__all__ = ["Overlay", "OverlayReader", "class_colour", "draw_overlay"]

_MASK_ALPHA = 0.45


def class_colour(index: int) -> tuple[int, int, int]:
    """A bright colour of class ``index``, far from its neighbours' (hues by the golden ratio)."""
    hue = (index * 0.618033988749895) % 1.0
    red, green, blue = colorsys.hsv_to_rgb(hue, 0.85, 0.95)
    return round(red * 255), round(green * 255), round(blue * 255)


@dataclass(frozen=True)
class Overlay:
    """What is drawn on one sample: its mask (or None), its boxes as pixel corners of the stored
    image (``[N, 4]``; normalised ones once the image's size is known), and each box's class."""

    mask: np.ndarray | None
    ignore: int | None
    boxes: np.ndarray
    normalized: bool
    classes: tuple[int, ...]
    names: tuple[str, ...]
    outlines: tuple[Any, ...] = ()
    outlines_normalized: bool = False

    def label(self, box: int) -> str:
        """The text above box number ``box``: its class name, its number, or nothing."""
        if box >= len(self.classes):
            return ""
        index = self.classes[box]
        return self.names[index] if 0 <= index < len(self.names) else str(index)


class OverlayReader:
    """Which fields of ``schema`` a sheet draws (the mask and boxes tied to its first image, the
    box labels of those boxes), and reading them from records."""

    def __init__(self, schema: Schema) -> None:
        image = first_image_field(schema)
        self.mask = tied_field(schema, "mask", image)
        self.boxes = tied_field(schema, "boxes", image)
        self.labels = tied_field(schema, "box_labels", self.boxes, "boxes")
        self.outlines = tied_field(schema, "polygons", self.boxes, "boxes")
        chosen = (self.mask, self.boxes, self.labels, self.outlines)
        self.names = tuple(f.name for f in chosen if f is not None)
        self.decoder = stored_decoder(schema) if self.names else None

    @property
    def active(self) -> bool:
        """Whether the schema has anything to draw."""
        return bool(self.names)

    def overlay(self, record: bytes | memoryview) -> Overlay | None:
        """The overlay of one record, or None when there is nothing to draw or it does not decode."""
        if self.decoder is None:
            return None
        try:
            values: dict[str, Any] = self.decoder.decode(record, self.names)
        except (ValueError, KeyError):
            return None  # a damaged record: its cell says so through its image
        boxes, normalized = np.zeros((0, 4)), False
        if self.boxes is not None:
            boxes = as_xyxy(np.asarray(values[self.boxes.name], dtype=np.float64).reshape(-1, 4),
                            self.boxes.params["format"])
            normalized = bool(self.boxes.params["normalized"])
        classes = tuple(int(v) for v in values[self.labels.name]) if self.labels is not None else ()
        names = tuple(self.labels.params.get("classes") or ()) if self.labels is not None else ()
        mask = np.asarray(values[self.mask.name]) if self.mask is not None else None
        ignore = self.mask.params.get("ignore") if self.mask is not None else None
        outlines = tuple(values[self.outlines.name] or ()) if self.outlines is not None else ()
        shapes_normalized = bool(self.outlines.params["normalized"]) if self.outlines is not None else False
        return Overlay(mask, ignore, boxes, normalized, classes, names, outlines, shapes_normalized)


def _paint_mask(thumb: Image.Image, mask: np.ndarray, ignore: int | None) -> Image.Image:
    """``thumb`` with ``mask`` (resized nearest to it) blended over it in class colours."""
    small = np.asarray(Image.fromarray(mask).resize(thumb.size, Image.Resampling.NEAREST))
    shown = (small != 0) & ((small != ignore) if ignore is not None else True)
    if not shown.any():
        return thumb
    palette = np.array([class_colour(i) for i in range(int(small.max()) + 1)], dtype=np.float64)
    pixels = np.asarray(thumb, dtype=np.float64).copy()
    pixels[shown] = (1 - _MASK_ALPHA) * pixels[shown] + _MASK_ALPHA * palette[small[shown]]
    return Image.fromarray(pixels.round().astype(np.uint8))


_Font = ImageFont.ImageFont | ImageFont.FreeTypeFont | ImageFont.TransposedFont


def draw_overlay(thumb: Image.Image, size: tuple[int, int], overlay: Overlay, font: _Font) -> Image.Image:
    """``thumb`` (the stored image of ``size``, scaled) with the overlay's mask and boxes drawn."""
    image = thumb.convert("RGB")
    if overlay.mask is not None and overlay.mask.ndim == 2:
        image = _paint_mask(image, overlay.mask, overlay.ignore)
    if overlay.outlines:
        colours = [class_colour(overlay.classes[n]) if n < len(overlay.classes) else (255, 255, 0)
                   for n in range(len(overlay.outlines))]
        image = paint_outlines(image, size, overlay.outlines, colours, normalized=overlay.outlines_normalized)
    if not len(overlay.boxes):
        return image
    scale = np.array([thumb.width, thumb.height] * 2, dtype=np.float64)
    if not overlay.normalized:
        scale = scale / np.array([size[0], size[1]] * 2, dtype=np.float64)
    draw = ImageDraw.Draw(image)
    width = max(1, min(image.size) // 64)
    for number, corners in enumerate(overlay.boxes * scale):
        x1, y1, x2, y2 = (float(v) for v in corners)
        colour = class_colour(overlay.classes[number]) if number < len(overlay.classes) else (255, 255, 0)
        draw.rectangle((min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)), outline=colour, width=width)
        text = overlay.label(number)
        if text:
            left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
            at = (max(0.0, x1), max(0.0, y1 - (bottom - top) - 2))
            draw.rectangle((at[0], at[1], at[0] + right - left + 2, at[1] + bottom - top + 2), fill=colour)
            draw.text((at[0] + 1, at[1] + 1 - top), text, fill=(0, 0, 0), font=font)
    return image
