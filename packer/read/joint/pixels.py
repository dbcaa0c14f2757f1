"""The image and its masks through a :class:`~packer.read.joint.placement.Placement`.

The image goes through packer's fused decode-crop-resize (:func:`packer.read.crop_resize.render`:
reduced JPEG decodes, ``pixels`` records read in place), so a placement that fills the output
gives exactly the pixels of :class:`packer.read.transforms.RandomResizedCropFlip`; padding is
``fill``. Masks are gathered pixel by pixel, Pillow-nearest (exact, any integer dtype kept),
padding ``mask_fill``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from packer.read.crop_resize import render
from packer.read.decoding import Picture
from packer.read.joint.placement import Placement

__all__ = ["place_image", "place_mask"]


def place_image(picture: Picture, placement: Placement, fill: int | Sequence[int], *, draft_gap: float,
                resampler: str) -> torch.Tensor:
    """``picture`` placed in a ``uint8 (3, height, width)`` tensor, padding filled with ``fill``."""
    out = torch.empty((3, *placement.size), dtype=torch.uint8)
    canvas = out.numpy()
    if placement.covers():  # the classification fast path: straight into the output, flip included
        render(picture, placement.source_box(), canvas, flip=placement.flip, draft_gap=draft_gap,
               resampler=resampler)
        return out
    canvas[...] = np.asarray(fill, dtype=np.uint8).reshape(-1, 1, 1)
    left, top, right, bottom = placement.content_box()
    if right > left and bottom > top:
        content = np.empty((3, bottom - top, right - left), dtype=np.uint8)
        render(picture, placement.source_box(), content, flip=False, draft_gap=draft_gap,
               resampler=resampler)
        canvas[:, top:bottom, left:right] = content
    if placement.flip:
        canvas[...] = canvas[:, :, ::-1].copy()
    return out


def mask_array(mask: Any, name: str) -> np.ndarray:
    """A decoded mask (an integer array, tensor or PIL image) as a 2-D numpy array."""
    if isinstance(mask, bytes | bytearray | memoryview):
        raise TypeError(f"mask field {name!r} arrived as stored bytes: open the dataset with "
                        "decode={'<image field>': False} so that only the image stays encoded")
    if isinstance(mask, torch.Tensor):
        mask = mask.numpy()
    array = np.asarray(mask) if isinstance(mask, Image.Image | np.ndarray) else None
    if array is None or array.ndim != 2 or array.dtype.kind not in "biu":
        raise TypeError(f"mask field {name!r} must be a 2-D integer array, not {type(mask).__name__}")
    return array


def place_mask(mask: Any, placement: Placement, source_size: tuple[int, int], fill: int,
               name: str = "mask") -> torch.Tensor:
    """``mask`` (the ``source_size`` (width, height) image's) placed as the image is: a tensor of
    the output size and the mask's dtype, each pixel Pillow-nearest, padding ``fill``."""
    array = mask_array(mask, name)
    if array.shape != (source_size[1], source_size[0]):
        raise ValueError(f"mask field {name!r} is {array.shape[1]}x{array.shape[0]}, its image "
                         f"{source_size[0]}x{source_size[1]}")
    if array.dtype.kind != "b" and not np.iinfo(array.dtype).min <= fill <= np.iinfo(array.dtype).max:
        raise ValueError(f"mask_fill {fill} does not fit mask field {name!r}'s {array.dtype}")
    out = np.full(placement.size, fill, dtype=array.dtype)
    left, top, right, bottom = placement.content_box()
    if right > left and bottom > top:
        out[top:bottom, left:right] = array[placement.rows.source_pixels()][:, placement.cols.source_pixels()]
    if placement.flip:
        out = out[:, ::-1]
    return torch.from_numpy(np.ascontiguousarray(out))
