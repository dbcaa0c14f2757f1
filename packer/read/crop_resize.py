"""The fused decode-crop-resize step of both packer transforms: :func:`crop_resize`.

Given stored bytes (``decode=False``) it reads the size from the header, decodes a JPEG at
1/2, 1/4 or 1/8 scale when the crop stays at least ``draft_gap`` times the output size
(libjpeg's DCT-domain scaling), and resizes just the crop, in one pass, into the output tensor.
Given a PIL image (``decode=True``) it does the same without the reduced decode. A ``pixels``
record (``--codec pixels``) is read in place: no decode, no copy. Colour modes convert as
``convert("RGB")`` does; EXIF orientation is not applied, as in ImageFolder.

Decoders are :data:`packer.read.decoding.DECODERS` (simplejpeg or Pillow: the same pixels);
resamplers are :data:`packer.read.resampling.RESAMPLERS`. ``"opencv"`` and ``"torch"`` crop to whole
pixels and clamp at the crop's edge, as torchvision's crop-then-resize does; ``"pil"`` gives
exactly ``Image.open(f).convert("RGB").resize(size, BILINEAR, box=crop)``, sub-pixel box included
(it differs from torchvision's crop-then-resize only on the border, whose filter sees just past
the crop).

The helpers without a leading underscore are shared with :mod:`packer.read.transforms`, not public API.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image

from packer.read.crop_params import Box, size_pair
from packer.read.decoding import REDUCTIONS, Picture, Sample, open_picture, resolve_decoder
from packer.read.resampling import resize_into, resolve_resampler

__all__ = ["Box", "Sample", "crop_resize", "to_uint8_tensor"]

def check_gap(draft_gap: float) -> float:
    if not draft_gap >= 1.0:
        raise ValueError(f"draft_gap must be 1.0 or more, not {draft_gap!r}")
    return float(draft_gap)


def to_uint8_tensor(image: Image.Image, *, flip: bool = False) -> torch.Tensor:
    """A contiguous ``uint8`` ``(3, H, W)`` tensor of ``image`` (converted to RGB), mirrored if ``flip``."""
    if image.mode != "RGB":
        image = image.convert("RGB")
    array = np.asarray(image)
    if flip:
        array = array[:, ::-1]
    return torch.from_numpy(np.array(array.transpose(2, 0, 1), order="C"))


def reduction(box: Box, size: tuple[int, int], gap: float) -> int:
    """The largest DCT reduction (8, 4, 2, else 1) leaving the crop at least ``gap`` times
    the output ``size`` (height, width)."""
    box_w, box_h = box[2] - box[0], box[3] - box[1]
    for scale in REDUCTIONS:
        if box_w / scale >= size[1] * gap and box_h / scale >= size[0] * gap:
            return scale
    return 1


def scaled_box(box: Box, reduce: int, width: int, height: int) -> Box:
    """``box`` in a picture reduced ``reduce`` times, now ``width`` x ``height``."""
    if reduce == 1:
        return box
    return (box[0] / reduce, box[1] / reduce, min(box[2] / reduce, width), min(box[3] / reduce, height))


def pixel_box(box: Box, width: int, height: int) -> tuple[int, int, int, int]:
    """``box`` rounded to whole pixels, still at least one pixel, inside the image."""
    left, top = min(round(box[0]), width - 1), min(round(box[1]), height - 1)
    right, bottom = max(round(box[2]), left + 1), max(round(box[3]), top + 1)
    return left, top, min(right, width), min(bottom, height)


def decode_for(picture: Picture, box: Box, size: tuple[int, int], *, draft_gap: float,
               resampler: str) -> tuple[np.ndarray | Image.Image, int]:
    """Decode ``picture`` for cropping ``box`` to ``size``: at the smallest scale the gap
    allows, as an array (or a PIL image for the ``"pil"`` resampler); with the scale applied."""
    reduce = reduction(box, size, draft_gap) if picture.reducible else 1
    return picture.pil(reduce) if resampler == "pil" else picture.pixels(reduce)


def resample(decoded: np.ndarray | Image.Image, applied: int, box: Box, out: np.ndarray, *, flip: bool,
             resampler: str) -> None:
    """Crop ``box`` (source pixels) of what :func:`decode_for` gave, resize it into ``out``
    (a C-contiguous ``uint8`` ``(3, height, width)`` array), mirrored if ``flip``."""
    if isinstance(decoded, Image.Image):
        resized = decoded.resize((out.shape[2], out.shape[1]), Image.Resampling.BILINEAR,
                                 box=scaled_box(box, applied, *decoded.size))
        out[...] = to_uint8_tensor(resized, flip=flip).numpy()
        return
    height, width = decoded.shape[:2]
    left, top, right, bottom = pixel_box(scaled_box(box, applied, width, height), width, height)
    resize_into(decoded[top:bottom, left:right], out, flip=flip, resampler=resampler)


def render(picture: Picture, box: Box, out: np.ndarray, *, flip: bool, draft_gap: float,
           resampler: str) -> None:
    """Crop ``box`` (source pixels) of ``picture`` into ``out``, a C-contiguous ``uint8``
    ``(3, height, width)`` array: reduced decode when allowed, one resize, flip."""
    decoded, applied = decode_for(picture, box, (out.shape[1], out.shape[2]), draft_gap=draft_gap,
                                  resampler=resampler)
    resample(decoded, applied, box, out, flip=flip, resampler=resampler)


def _check_box(box: Sequence[float], width: int, height: int) -> Box:
    left, top, right, bottom = (float(v) for v in box)
    if not (0 <= left < right <= width and 0 <= top < bottom <= height):
        raise ValueError(f"box {tuple(box)!r} is not a non-empty region of the {width}x{height} image")
    return left, top, right, bottom


def crop_resize(sample: Sample, box: Sequence[float], size: int | Sequence[int], *, flip: bool = False,
                draft_gap: float = 2.0, resampler: str = "auto", decoder: str = "auto") -> torch.Tensor:
    """Crop ``box`` and resize it to ``size`` in one pass; the fused op both transforms use.

    Args:
        sample: A PIL image or the encoded bytes of one.
        box: ``(left, top, right, bottom)`` in source pixels, as PIL's (floats allowed).
        size: Output ``(height, width)``, or an int for a square, as torchvision's.
        flip: Mirror the result left to right.
        draft_gap: JPEG bytes decode at the smallest 1/2, 1/4 or 1/8 scale that keeps the crop at
            least this many times the output size; ``math.inf`` never reduces. 2.0 (the
            default) keeps the result within a level or so of a full decode; 1.0 is faster on
            large images and further off.
        resampler: ``"auto"`` (OpenCV when installed, else torch), ``"opencv"``, ``"torch"``
            or ``"pil"``; see :mod:`packer.read.resampling`.
        decoder: ``"auto"`` (simplejpeg when installed, else Pillow), ``"simplejpeg"`` or ``"pil"``.

    Returns:
        A contiguous ``uint8`` tensor of shape ``(3, height, width)``.

    Raises:
        ValueError: ``box`` is not inside the image, ``size`` is not positive, or a name is unknown.
        TypeError: ``sample`` is neither a PIL image nor bytes.
        MissingExtraError: ``"opencv"`` or ``"simplejpeg"`` is asked for and not installed.
    """
    height, width = size_pair(size, "size")
    gap = check_gap(draft_gap)
    how = resolve_resampler(resampler)
    out = torch.empty((3, height, width), dtype=torch.uint8)
    picture = open_picture(sample, resolve_decoder(decoder))
    try:
        checked = _check_box(box, picture.width, picture.height)
        render(picture, checked, out.numpy(), flip=flip, draft_gap=gap, resampler=how)
    finally:
        picture.close()
    return out
