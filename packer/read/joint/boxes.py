"""Boxes through a :class:`~packer.read.joint.placement.Placement`: to corner pixels, moved,
clipped to the output, dropped when too little stays visible, flipped, and back to the field's
own format and normalisation; plus the rows of per-box fields (``box_labels``) that go with them."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from packer.read.joint.placement import Placement

__all__ = ["move_boxes", "take_rows"]


def to_corners(boxes: np.ndarray, fmt: str) -> np.ndarray:
    """``boxes`` (``[N, 4]``, float64) in ``fmt`` (xyxy, xywh, cxcywh) as ``x1, y1, x2, y2``."""
    a, b, c, d = boxes.T
    if fmt == "xywh":
        return np.stack([a, b, a + c, b + d], axis=1)
    if fmt == "cxcywh":
        return np.stack([a - c / 2, b - d / 2, a + c / 2, b + d / 2], axis=1)
    if fmt == "xyxy":
        return boxes.copy()
    raise ValueError(f"unknown box format {fmt!r} (xyxy, xywh, cxcywh)")


def from_corners(corners: np.ndarray, fmt: str) -> np.ndarray:
    """Corner boxes back in ``fmt``."""
    x1, y1, x2, y2 = corners.T
    if fmt == "xywh":
        return np.stack([x1, y1, x2 - x1, y2 - y1], axis=1)
    if fmt == "cxcywh":
        return np.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], axis=1)
    return corners


def move_boxes(boxes: Any, placement: Placement, source_size: tuple[int, int], *, fmt: str = "xyxy",
               normalized: bool = False, min_visibility: float = 0.0) -> tuple[torch.Tensor, np.ndarray]:
    """The boxes of a ``source_size`` (width, height) image as placed in the output, and which
    of the input boxes were kept.

    A box is kept when its area after clipping to the output is positive and at least
    ``min_visibility`` times its area before clipping (both in output pixels).

    Returns:
        ``float32 [M, 4]`` boxes in ``fmt`` (normalised to the output size if ``normalized``)
        and a ``bool [N]`` array, True for each input box kept.
    """
    array = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    corners = to_corners(array, fmt)
    if normalized:
        corners = corners * np.array([*source_size, *source_size], dtype=np.float64)
    rows, cols = placement.rows, placement.cols
    moved = np.stack([cols.to_output(corners[:, 0]), rows.to_output(corners[:, 1]),
                      cols.to_output(corners[:, 2]), rows.to_output(corners[:, 3])], axis=1)
    height, width = placement.size
    clipped = moved.clip(0, [width, height, width, height])
    before = (moved[:, 2] - moved[:, 0]).clip(0) * (moved[:, 3] - moved[:, 1]).clip(0)
    after = (clipped[:, 2] - clipped[:, 0]).clip(0) * (clipped[:, 3] - clipped[:, 1]).clip(0)
    keep = (after > 0) & (after >= min_visibility * before)
    kept = clipped[keep]
    if placement.flip:
        kept = np.stack([width - kept[:, 2], kept[:, 1], width - kept[:, 0], kept[:, 3]], axis=1)
    kept = from_corners(kept, fmt)
    if normalized:
        kept = kept / np.array([width, height, width, height], dtype=np.float64)
    return torch.from_numpy(kept.astype(np.float32).reshape(-1, 4)), keep


def take_rows(value: Any, keep: np.ndarray, name: str) -> Any:
    """The rows of a per-box field's ``value`` whose boxes were kept: a tensor (integer arrays
    as ``int64``, others in their dtype), or a list for a list of non-numbers."""
    if isinstance(value, torch.Tensor):
        value = value.numpy()
    if isinstance(value, list | tuple) and not all(isinstance(v, int | float) for v in value):
        if len(value) != len(keep):
            raise ValueError(f"field {name!r} has {len(value)} rows for {len(keep)} boxes")
        return [v for v, wanted in zip(value, keep, strict=True) if wanted]
    array = np.asarray(value)
    if array.ndim == 0 or array.shape[0] != len(keep):
        raise ValueError(f"field {name!r} has {array.shape[:1]} rows for {len(keep)} boxes")
    rows = array[keep]
    if rows.dtype.kind in "biu":
        rows = rows.astype(np.int64)
    return torch.from_numpy(np.ascontiguousarray(rows))
