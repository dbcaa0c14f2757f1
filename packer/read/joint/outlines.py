"""Outlines (a ``polygons`` field) through a :class:`~packer.read.joint.placement.Placement`, with
their boxes: each ring's points moved as the boxes' corners are, clipped to the output (exact
Sutherland-Hodgman clipping against its rectangle), mirrored with a flip; an RLE (a COCO crowd) is
decoded, placed as a mask is (nearest) and encoded again at the output size (pycocotools, the
``coco`` extra, only for RLEs). The entries of the boxes dropped go too, so entry ``i`` stays
box ``i``'s. Each entry keeps its form (a flat ring, a list of rings, an RLE); a ring left with
fewer than three points inside the output is dropped from its entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from packer.format.fields.rle import decode_rle, encode_rle
from packer.format.fields.types.outlines import is_ring, is_rle
from packer.read.joint.pixels import place_mask
from packer.read.joint.placement import Placement

__all__ = ["clip_ring", "move_outlines"]


def _clip_edge(points: np.ndarray, axis: int, bound: float, keep_below: bool) -> np.ndarray:
    """``points`` (``[K, 2]``, a closed ring) clipped to one half-plane: coordinate ``axis``
    at most ``bound`` (``keep_below``) or at least ``bound``."""
    inside = points[:, axis] <= bound if keep_below else points[:, axis] >= bound
    if inside.all():  # most rings lie inside the output: no per-point work
        return points
    out: list[np.ndarray] = []
    previous, was_inside = points[-1], bool(inside[-1])
    for point, now_inside in zip(points, inside, strict=True):
        if now_inside != was_inside:  # the edge crosses the bound: add the crossing
            t = (bound - previous[axis]) / (point[axis] - previous[axis])
            crossing = previous + t * (point - previous)
            crossing[axis] = bound
            out.append(crossing)
        if now_inside:
            out.append(point)
        previous, was_inside = point, bool(now_inside)
    return np.array(out, dtype=np.float64).reshape(-1, 2)


def clip_ring(points: np.ndarray, width: float, height: float) -> np.ndarray:
    """The ring ``points`` (``[K, 2]`` x, y) clipped to ``[0, width] x [0, height]``."""
    for axis, bound, below in ((0, 0.0, False), (0, width, True), (1, 0.0, False), (1, height, True)):
        points = _clip_edge(points, axis, bound, below)
    return points


def _move_ring(ring: Sequence[float], placement: Placement, scale: tuple[float, float],
               normalized: bool) -> list[float] | None:
    """One flat ring moved, clipped and flipped; None when fewer than three points are left."""
    height, width = placement.size
    points = np.asarray(ring, dtype=np.float64).reshape(-1, 2) * np.asarray(scale)
    moved = np.stack([placement.cols.to_output(points[:, 0]), placement.rows.to_output(points[:, 1])], axis=1)
    clipped = clip_ring(moved, width, height)
    if len(clipped) < 3:
        return None
    if placement.flip:
        clipped[:, 0] = width - clipped[:, 0]
    if normalized:
        clipped = clipped / np.array([width, height], dtype=np.float64)
    return [float(v) for v in clipped.reshape(-1)]


def _move_rle(rle: dict[str, Any], placement: Placement, source_size: tuple[int, int]) -> dict[str, Any]:
    """A COCO RLE of the source image placed as its mask would be, encoded at the output size."""
    needed_by = "moving an RLE outline"
    mask = place_mask(decode_rle(rle, needed_by=needed_by), placement, source_size, 0, "an RLE outline")
    return encode_rle(mask.numpy(), needed_by=needed_by)


def _move_entry(entry: Any, placement: Placement, source_size: tuple[int, int], scale: tuple[float, float],
                normalized: bool) -> Any:
    """One box's outline placed, in the form it came in (``scale``: to source pixels)."""
    if entry is None:
        return None
    if isinstance(entry, list | tuple) and not entry:
        return []
    if is_rle(entry):
        return _move_rle(dict(entry), placement, source_size)
    if is_ring(entry):
        moved = _move_ring(entry, placement, scale, normalized)
        return moved if moved is not None else []
    rings = (_move_ring(ring, placement, scale, normalized) for ring in entry)
    return [ring for ring in rings if ring is not None]


def move_outlines(value: Any, keep: np.ndarray, placement: Placement, source_size: tuple[int, int], *,
                  normalized: bool = False, name: str = "polygons") -> list[Any]:
    """The outlines of the boxes kept (``keep``, from :func:`~packer.read.joint.boxes.move_boxes`)
    of a ``source_size`` (width, height) image, placed in the output.

    Raises:
        ValueError: ``value`` has another count of entries than there were boxes.
    """
    entries = list(value or [])
    if len(entries) != len(keep):
        raise ValueError(f"field {name!r} has {len(entries)} outlines for {len(keep)} boxes")
    scale = (float(source_size[0]), float(source_size[1])) if normalized else (1.0, 1.0)
    return [_move_entry(entry, placement, source_size, scale, normalized)
            for entry, wanted in zip(entries, keep, strict=True) if wanted]
