"""Where a joint transform puts the source image in its output: one :class:`Placement` shared by
the image, its masks and its boxes, so all three move together.

Along each axis (:class:`Axis`) a span of whole source pixels ``[start, start + length)`` is
resized to ``scaled`` output pixels, and scaled pixel ``k`` lands on output pixel
``k + offset`` of an output ``size`` pixels long: a negative offset crops the scaled span, a
positive one (or a span shorter than the output) leaves padding. After both axes, the whole output
may be mirrored left to right (``flip``). The three transforms are three ways of choosing these
numbers (:mod:`packer.read.joint.layouts`).

Continuous coordinates (boxes) map linearly: source ``x`` is output
``(x - start) * scaled / length + offset``. Pixels (masks) map as Pillow's ``NEAREST`` resize of
the span does (:func:`nearest_indices`), so a mask equals Pillow's crop-then-resize exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Axis", "Placement", "nearest_indices"]


def nearest_indices(length: int, scaled: int) -> np.ndarray:
    """The source pixel (``0..length-1``) of each of ``scaled`` output pixels under Pillow's
    ``NEAREST`` resize of ``length`` pixels to ``scaled``.

    Pillow starts at half a step and adds the step pixel by pixel in doubles (its
    ``ImagingScaleAffine``, used for 8-bit and 32-bit images), truncating each position; the
    additions are repeated here in the same order, so ties (a position landing exactly on a
    pixel edge) round as Pillow's do rather than as exact arithmetic would.
    """
    step = length / scaled
    positions = np.add.accumulate(np.concatenate(([step * 0.5], np.full(scaled - 1, step))))
    return np.minimum(positions.astype(np.int64), length - 1)


@dataclass(frozen=True)
class Axis:
    """One axis of a :class:`Placement` (see the module docstring).

    Attributes:
        size: Output pixels along the axis.
        start: First source pixel of the span resized.
        length: Source pixels in the span (at least 1).
        scaled: Output pixels the span is resized to (at least 1).
        offset: Output pixel where scaled pixel 0 lands (negative: cropped off).
    """

    size: int
    start: int
    length: int
    scaled: int
    offset: int = 0

    def __post_init__(self) -> None:
        if min(self.size, self.length, self.scaled) < 1 or self.start < 0:
            raise ValueError(f"not a placement axis: {self!r}")

    def content(self) -> tuple[int, int]:
        """The output pixels ``[begin, end)`` that show the image (the rest is padding)."""
        begin = max(0, self.offset)
        end = min(self.size, self.offset + self.scaled)
        return begin, max(begin, end)

    def to_source(self, u: float) -> float:
        """Source coordinate shown at output coordinate ``u`` (continuous)."""
        return self.start + (u - self.offset) * self.length / self.scaled

    def to_output(self, x: np.ndarray) -> np.ndarray:
        """Output coordinates of source coordinates ``x`` (continuous, float64)."""
        return (x - self.start) * (self.scaled / self.length) + self.offset

    def source_pixels(self) -> np.ndarray:
        """The source pixel shown by each output pixel of :meth:`content`, Pillow-nearest."""
        begin, end = self.content()
        indices = nearest_indices(self.length, self.scaled)[begin - self.offset: end - self.offset]
        return indices + self.start


@dataclass(frozen=True)
class Placement:
    """Both axes of where the source lands in the output, and whether the output is mirrored."""

    rows: Axis
    cols: Axis
    flip: bool = False

    @property
    def size(self) -> tuple[int, int]:
        """The output ``(height, width)``."""
        return self.rows.size, self.cols.size

    def content_box(self) -> tuple[int, int, int, int]:
        """``(left, top, right, bottom)`` of the output pixels showing the image, before the flip."""
        (top, bottom), (left, right) = self.rows.content(), self.cols.content()
        return left, top, right, bottom

    def covers(self) -> bool:
        """Whether the image fills the whole output (no padding)."""
        return self.content_box() == (0, 0, self.cols.size, self.rows.size)

    def source_box(self) -> tuple[float, float, float, float]:
        """``(left, top, right, bottom)`` in source pixels of what :meth:`content_box` shows."""
        left, top, right, bottom = self.content_box()
        return (self.cols.to_source(left), self.rows.to_source(top),
                min(self.cols.to_source(right), self.cols.start + self.cols.length),
                min(self.rows.to_source(bottom), self.rows.start + self.rows.length))
