"""The fused decode-crop-resize step both packer transforms use: :func:`crop_resize`.

Given stored bytes (``decode=False``) it reads the size from the header, lets libjpeg decode a
JPEG at 1/2, 1/4 or 1/8 scale when the crop is large enough for the output (Pillow's ``draft``:
DCT-domain scaling; ``draft_gap`` trades speed for closeness), and resizes the crop in one
pass, bilinear with antialiasing as torchvision's on PIL images. Given a PIL image
(``decode=True``) it does the same without the draft. A ``pixels`` record (``--codec pixels``)
is read in place: no decode, no copy. Colour modes convert as ``convert("RGB")`` does; EXIF
orientation is not applied, as in ImageFolder.

Two resamplers (:data:`RESAMPLERS`): ``"torch"``, the default, crops to whole pixels and runs
torch's ``uint8`` antialiased bilinear kernel (about half the time of PIL's; it clamps at the
crop's edge, as torchvision's crop-then-resize does); ``"pil"`` gives exactly
``Image.open(f).convert("RGB").resize(size, BILINEAR, box=crop)``, sub-pixel box included (it
differs from torchvision's crop-then-resize only on the border, whose filter sees just past the
crop). Inside the crop the two agree within one or two levels.

The bytes must be one of packer's payloads (the ``original`` codec, ``jpeg``, or ``pixels``);
opening an encoded image applies Pillow's own ``MAX_IMAGE_PIXELS`` limit. The helpers without
a leading underscore here are shared with :mod:`packer.transforms`, not public API.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Final, TypeAlias

import numpy as np
import torch
from PIL import Image

from packer.imagecheck import pixel_limit_lifted
from packer.reencode import pixels_array

__all__ = ["RESAMPLERS", "Box", "Sample", "crop_resize", "to_uint8_tensor"]

# torch warns (once per process) that a tensor over a read-only array must not be written to;
# these tensors are only read. One filter, scoped to this module, rather than catch_warnings
# around every image in a DataLoader worker.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning,
                        module=r"packer\.crop_resize")

#: What a transform takes: a PIL image (``decode=True``) or encoded bytes (``decode=False``).
Sample: TypeAlias = Image.Image | bytes | bytearray | memoryview
Box: TypeAlias = tuple[float, float, float, float]

_DRAFT_SCALES: Final = (8, 4, 2)

#: How the crop is resized: torch's ``uint8`` antialiased bilinear kernel (the default, about
#: twice as fast) or PIL's ``Image.resize(box=...)`` (torchvision-on-PIL's pixels exactly).
RESAMPLERS: Final[tuple[str, ...]] = ("torch", "pil")


def check_resampler(resampler: str) -> str:
    if resampler not in RESAMPLERS:
        raise ValueError(f"resampler must be one of {', '.join(RESAMPLERS)}, not {resampler!r}")
    return resampler


def size_pair(size: int | Sequence[int], name: str) -> tuple[int, int]:
    """``(height, width)`` from an int or a pair, as torchvision reads ``size``."""
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(isinstance(v, int) and v > 0 for v in pair):
        raise ValueError(f"{name} must be a positive int or a (height, width) pair, not {size!r}")
    return pair[0], pair[1]


def check_gap(draft_gap: float) -> float:
    if not draft_gap >= 1.0:
        raise ValueError(f"draft_gap must be 1.0 or more, not {draft_gap!r}")
    return float(draft_gap)


@contextmanager
def opened(sample: Sample) -> Iterator[tuple[Image.Image | np.ndarray, bool]]:
    """The image (not yet decoded when given bytes; an ``HWC`` array view for a ``pixels``
    record) and whether draft may be used on it."""
    if isinstance(sample, Image.Image):
        yield sample, False
        return
    if not isinstance(sample, bytes | bytearray | memoryview):
        raise TypeError(f"expected a PIL image or encoded bytes, not {type(sample).__name__}")
    if (pixels := pixels_array(sample)) is not None:
        yield pixels, False
        return
    # Conversion vetted every stored image against its own pixel limit, as decode=True trusts.
    with pixel_limit_lifted(), Image.open(io.BytesIO(sample)) as image:
        yield image, True


def image_size(image: Image.Image | np.ndarray) -> tuple[int, int]:
    """``(width, height)``, as PIL's ``size``."""
    if isinstance(image, np.ndarray):
        return image.shape[1], image.shape[0]
    return image.size


def to_uint8_tensor(image: Image.Image, *, flip: bool = False) -> torch.Tensor:
    """A contiguous ``uint8`` ``(3, H, W)`` tensor of ``image`` (converted to RGB), mirrored if ``flip``."""
    if image.mode != "RGB":
        image = image.convert("RGB")
    array = np.asarray(image)
    if flip:
        array = array[:, ::-1]
    return torch.from_numpy(np.array(array.transpose(2, 0, 1), order="C"))


def _draft_scale(box: Box, out_w: int, out_h: int, gap: float) -> int:
    """The largest JPEG reduction leaving the crop at least ``gap`` times the output size."""
    box_w, box_h = box[2] - box[0], box[3] - box[1]
    for scale in _DRAFT_SCALES:
        if box_w / scale >= out_w * gap and box_h / scale >= out_h * gap:
            return scale
    return 1


def drafted(image: Image.Image | np.ndarray, box: Box, size: tuple[int, int], *, draft: bool,
             draft_gap: float) -> tuple[Image.Image | np.ndarray, Box]:
    """Let libjpeg decode at a reduced scale when allowed and the crop is large enough;
    the image and ``box`` in its (maybe reduced) coordinates."""
    out_h, out_w = size
    if isinstance(image, Image.Image) and draft \
            and (scale := _draft_scale(box, out_w, out_h, draft_gap)) > 1:
        width, height = image.size
        applied = image.draft("RGB", (width // scale, height // scale))
        if applied is not None:
            fx, fy = width / applied[1][2], height / applied[1][3]
            box = (box[0] / fx, box[1] / fy, min(box[2] / fx, image.width), min(box[3] / fy, image.height))
    return image, box


def hwc_tensor(image: Image.Image | np.ndarray) -> torch.Tensor:
    """An ``HWC`` ``uint8`` RGB tensor of ``image`` (a pixels record's array: not copied)."""
    if isinstance(image, Image.Image):
        if image.mode != "RGB":
            image = image.convert("RGB")
        image = np.asarray(image)
    return _readonly_tensor(image)


def fused(image: Image.Image | np.ndarray, box: Box, size: tuple[int, int], *, flip: bool, draft: bool,
           draft_gap: float, resampler: str) -> torch.Tensor:
    """Draft (if allowed), convert odd modes, one crop-resize, flip, tensor."""
    image, box = drafted(image, box, size, draft=draft, draft_gap=draft_gap)
    if resampler == "torch":
        return _crop_resize_tensor(hwc_tensor(image), box, size, flip=flip)
    if isinstance(image, np.ndarray):
        image = Image.fromarray(image, "RGB")
    if image.mode not in ("RGB", "L"):  # resizing P, RGBA, CMYK, I;16... differs from converting first
        image = image.convert("RGB")
    resized = image.resize((size[1], size[0]), Image.Resampling.BILINEAR, box=box)
    return to_uint8_tensor(resized, flip=flip)


def interpolate(chw: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Antialiased bilinear resize of a ``CHW`` ``uint8`` tensor (any strides) to ``size``."""
    return torch.nn.functional.interpolate(chw.unsqueeze(0), size=size, mode="bilinear",
                                           antialias=True, align_corners=False)[0]


def _readonly_tensor(array: np.ndarray) -> torch.Tensor:
    """``array`` as a tensor without a copy; it is only read (crop, resize, copy)."""
    return torch.from_numpy(array)


def _pixel_box(box: Box, width: int, height: int) -> tuple[int, int, int, int]:
    """``box`` rounded to whole pixels, still at least one pixel, inside the image."""
    left, top = min(round(box[0]), width - 1), min(round(box[1]), height - 1)
    right, bottom = max(round(box[2]), left + 1), max(round(box[3]), top + 1)
    return left, top, min(right, width), min(bottom, height)


def _crop_resize_tensor(hwc: torch.Tensor, box: Box, size: tuple[int, int], *, flip: bool) -> torch.Tensor:
    """Crop an ``HWC`` ``uint8`` tensor to ``box`` (whole pixels), resize, flip, as ``CHW``.

    torch's antialiased bilinear ``interpolate`` has a ``uint8`` kernel that works on the
    channels-last view directly and follows PIL's filter; it is about twice as fast as PIL's.
    """
    left, top, right, bottom = _pixel_box(box, hwc.shape[1], hwc.shape[0])
    chw = hwc[top:bottom, left:right].permute(2, 0, 1)
    if tuple(chw.shape[1:]) != size:
        chw = interpolate(chw, size)
    elif not flip:
        return chw.clone(memory_format=torch.contiguous_format)  # never a view of the source
    if flip:
        chw = chw.flip(-1)
    return chw.contiguous()


def _check_box(box: Sequence[float], width: int, height: int) -> Box:
    left, top, right, bottom = (float(v) for v in box)
    if not (0 <= left < right <= width and 0 <= top < bottom <= height):
        raise ValueError(f"box {tuple(box)!r} is not a non-empty region of the {width}x{height} image")
    return left, top, right, bottom


def crop_resize(sample: Sample, box: Sequence[float], size: int | Sequence[int], *, flip: bool = False,
                draft_gap: float = 1.0, resampler: str = "torch") -> torch.Tensor:
    """Crop ``box`` and resize it to ``size`` in one pass; the fused op both transforms use.

    Args:
        sample: A PIL image or the encoded bytes of one.
        box: ``(left, top, right, bottom)`` in source pixels, as PIL's (floats allowed).
        size: Output ``(height, width)``, or an int for a square, as torchvision's.
        flip: Mirror the result left to right.
        draft_gap: JPEG bytes decode at the smallest 1/2, 1/4 or 1/8 scale that keeps the crop at
            least this many times the output size; ``math.inf`` never drafts.
        resampler: ``"torch"`` rounds the box to whole pixels, crops, then resizes with torch's
            antialiased bilinear ``uint8`` kernel, which clamps at the crop's edge as
            torchvision's crop-then-resize does; ``"pil"`` resizes the exact (sub-pixel) box
            with PIL, whose filter sees just past it. Both are within a level or two of each
            other inside the crop (see :data:`RESAMPLERS`).

    Returns:
        A contiguous ``uint8`` tensor of shape ``(3, height, width)``.

    Raises:
        ValueError: ``box`` is not inside the image, or ``size`` is not positive.
        TypeError: ``sample`` is neither a PIL image nor bytes.
    """
    out = size_pair(size, "size")
    gap = check_gap(draft_gap)
    how = check_resampler(resampler)
    with opened(sample) as (image, draft):
        checked = _check_box(box, *image_size(image))
        return fused(image, checked, out, flip=flip, draft=draft, draft_gap=gap, resampler=how)
