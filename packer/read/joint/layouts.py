"""The placements of the three joint transforms, as plain functions of their draws (no RNG here):
a random resized crop, a scale-jittered fixed-size crop, a letterbox."""

from __future__ import annotations

from packer.read.joint.placement import Axis, Placement

__all__ = ["crop_placement", "fit_scale", "jitter_placement", "letterbox_placement", "scaled_size"]


def crop_placement(box: tuple[int, int, int, int], size: tuple[int, int], flip: bool) -> Placement:
    """The crop ``(top, left, height, width)`` of source pixels resized to fill ``size``."""
    top, left, height, width = box
    return Placement(Axis(size[0], top, height, size[0]), Axis(size[1], left, width, size[1]), flip)


def fit_scale(width: int, height: int, size: tuple[int, int]) -> float:
    """The scale at which a ``width`` x ``height`` image just fits inside ``size`` (height, width)."""
    return min(size[0] / height, size[1] / width)


def scaled_size(width: int, height: int, scale: float) -> tuple[int, int]:
    """``(height, width)`` of the image resized by ``scale``, rounded, at least one pixel."""
    return max(1, round(height * scale)), max(1, round(width * scale))


def jitter_placement(width: int, height: int, size: tuple[int, int], scaled: tuple[int, int],
                     top: int, left: int, flip: bool) -> Placement:
    """The whole image resized to ``scaled`` (height, width), cropped at ``top``, ``left`` (in
    the scaled image) to ``size``; where the scaled image is smaller the crop starts at 0 and
    the padding is at the bottom and right (before the flip)."""
    return Placement(Axis(size[0], 0, height, scaled[0], -top), Axis(size[1], 0, width, scaled[1], -left),
                     flip)


def letterbox_placement(width: int, height: int, size: tuple[int, int]) -> Placement:
    """The whole image resized to fit ``size`` keeping its aspect ratio, centred (padding split
    evenly, the odd pixel at the bottom and right)."""
    new_h, new_w = scaled_size(width, height, fit_scale(width, height, size))
    new_h, new_w = min(new_h, size[0]), min(new_w, size[1])
    return Placement(Axis(size[0], 0, height, new_h, (size[0] - new_h) // 2),
                     Axis(size[1], 0, width, new_w, (size[1] - new_w) // 2))
