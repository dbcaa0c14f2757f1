"""Outlines (a ``polygons`` field) painted on a contact sheet's thumbnail: each ring filled half
transparent in its box's colour and outlined; a crowd's RLE painted as its mask where pycocotools
imports (without it, the crowd is shown by its box alone: a preview never needs an extra)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from packer.format.fields.rle import decode_rle
from packer.format.fields.types.outlines import is_ring, is_rle

__all__ = ["paint_outlines"]

_ALPHA = 115  # of 255: the fill's opacity


def _rle_mask(rle: Any) -> np.ndarray | None:
    """The RLE decoded (``uint8`` at its own size), or None without pycocotools or when it is damaged."""
    try:
        return decode_rle(rle, needed_by="drawing a crowd's outline")
    except (ImportError, TypeError, ValueError):
        return None


def paint_outlines(image: Image.Image, size: tuple[int, int], outlines: Sequence[Any],
                   colours: Sequence[tuple[int, int, int]], *, normalized: bool = False) -> Image.Image:
    """``image`` (a thumbnail of a stored image of ``size`` (width, height)) with box ``i``'s
    outline ``outlines[i]`` painted in ``colours[i]``; coordinates in pixels of ``size``, or
    ``normalized`` to [0, 1]."""
    scale = np.array([image.width, image.height], dtype=np.float64)
    if not normalized:
        scale = scale / np.array(size, dtype=np.float64)
    layer = Image.new("RGBA", image.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    for entry, colour in zip(outlines, colours, strict=False):
        if not entry:
            continue
        if is_rle(entry):
            mask = _rle_mask(entry)
            if mask is not None and mask.any():
                small = Image.fromarray(mask * 255).resize(image.size, Image.Resampling.NEAREST)
                layer.paste(Image.new("RGBA", image.size, (*colour, _ALPHA)), (0, 0), small)
            continue
        for ring in ([entry] if is_ring(entry) else entry):
            corners = np.asarray(ring, dtype=np.float64).reshape(-1, 2) * scale
            points = [(float(x), float(y)) for x, y in corners]
            if len(points) >= 3:
                draw.polygon(points, fill=(*colour, _ALPHA), outline=(*colour, 255))
    return Image.alpha_composite(image.convert("RGBA"), layer).convert("RGB")
