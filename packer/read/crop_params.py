"""Where the transforms crop: torchvision's random-resized-crop draws and centre-crop geometry.

:func:`random_resized_crop_params` draws exactly what torchvision's
``RandomResizedCrop.get_params`` draws, from the same RNG in the same order (the tests replay
torchvision's code draw for draw), with less per-draw overhead: two scratch tensors per call
instead of a fresh one per draw, and the log ratio computed once.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

__all__ = ["Box", "center_crop_box", "center_crop_geometry", "random_resized_crop_params", "size_pair"]

Box = tuple[float, float, float, float]


def size_pair(size: int | Sequence[int], name: str) -> tuple[int, int]:
    """``(height, width)`` from an int or a pair, as torchvision reads ``size``."""
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(isinstance(v, int) and v > 0 for v in pair):
        raise ValueError(f"{name} must be a positive int or a (height, width) pair, not {size!r}")
    return pair[0], pair[1]


@functools.lru_cache(maxsize=64)
def _log_ratio(ratio: tuple[float, float]) -> tuple[float, float]:
    low, high = torch.log(torch.tensor(ratio)).tolist()  # float32, as torchvision
    return low, high


def random_resized_crop_params(width: int, height: int, scale: tuple[float, float] = (0.08, 1.0),
                               ratio: tuple[float, float] = (3 / 4, 4 / 3),
                               generator: torch.Generator | None = None) -> tuple[int, int, int, int]:
    """torchvision's ``RandomResizedCrop.get_params``, restated: ``(top, left, height, width)``.

    Same draws from the same RNG (torch's global one unless ``generator``): ten tries at a
    random area and log-uniform aspect ratio, else a central crop clamped to ``ratio``.
    """
    area = height * width
    log_low, log_high = _log_ratio((float(ratio[0]), float(ratio[1])))
    uniform = torch.empty(1)  # uniform_ on it draws as a fresh torch.empty(1).uniform_ does
    integer = torch.empty(1, dtype=torch.int64)  # random_(a, b) is what torch.randint(a, b) runs
    for _ in range(10):
        target_area = area * uniform.uniform_(scale[0], scale[1], generator=generator).item()
        aspect = uniform.uniform_(log_low, log_high, generator=generator).exp_().item()
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            i = int(integer.random_(0, height - h + 1, generator=generator).item())
            j = int(integer.random_(0, width - w + 1, generator=generator).item())
            return i, j, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        w, h = round(height * max(ratio)), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def center_crop_geometry(width: int, height: int, size: int | Sequence[int],
                         resize: int) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """torchvision's ``Resize(resize)`` size ``(height, width)`` and ``CenterCrop(size)``'s
    ``(left, top, right, bottom)`` in it."""
    crop_h, crop_w = size_pair(size, "size")
    if width <= height:
        new_w, new_h = resize, int(resize * height / width)
    else:
        new_w, new_h = int(resize * width / height), resize
    if crop_h > new_h or crop_w > new_w:
        raise ValueError(f"crop {crop_h}x{crop_w} is larger than the resized {new_h}x{new_w} image")
    top, left = round((new_h - crop_h) / 2.0), round((new_w - crop_w) / 2.0)
    return (new_h, new_w), (left, top, left + crop_w, top + crop_h)


def center_crop_box(width: int, height: int, size: int | Sequence[int] = 224, resize: int = 256) -> Box:
    """The source box that torchvision's ``Resize(resize)`` + ``CenterCrop(size)`` keeps.

    ``Resize`` takes the short side to ``resize`` and the long one to
    ``int(resize * long / short)``; ``CenterCrop`` offsets by ``round((side - crop) / 2)``.
    """
    (new_h, new_w), (left, top, right, bottom) = center_crop_geometry(width, height, size, resize)
    fx, fy = width / new_w, height / new_h
    return left * fx, top * fy, min(right * fx, width), min(bottom * fy, height)
