"""Fast training and evaluation transforms: ``uint8`` CHW tensors out, normalisation per batch.

torchvision's usual pipeline decodes each image at full size, converts it, crops, resizes, then
converts to float32 and normalises it in the worker, which sends four times the bytes through
the worker queues. Here workers return ``uint8`` ``(3, H, W)`` tensors and :class:`Normalize`
runs once per batch, on the GPU when there is one::

    train = packer.open_dataset(dst, transform=RandomResizedCropFlip(224), decode=False)
    loader = DataLoader(train, batch_size=256, num_workers=8, pin_memory=True, shuffle=True)
    normalize = Normalize()
    for images, targets in loader:
        images = normalize(images.cuda(non_blocking=True))

Given stored bytes (``decode=False``), a transform reads the size from the header, picks the
crop, lets libjpeg decode a JPEG at 1/2, 1/4 or 1/8 scale when the crop is large enough for the
output (Pillow's ``draft``: DCT-domain scaling), and resizes the crop in one pass
(``Image.resize`` with ``box``, bilinear with antialiasing, as torchvision on PIL images). Given
a PIL image (``decode=True``) it does the same without the draft. Without draft scaling the
pixels are those of ``Image.open(f).convert("RGB").resize(size, BILINEAR, box=crop)`` (which
differs from torchvision's crop-then-resize only on the border, whose filter sees just past the
crop); with it they differ slightly (``draft_gap`` trades speed for closeness). Colour modes
convert as ``convert("RGB")`` does; EXIF orientation is not applied, as in ImageFolder.

The bytes must be an encoded image (the ``original`` codec, or a re-encoding one such as
``jpeg``), and opening them applies Pillow's own ``MAX_IMAGE_PIXELS`` limit.

Crops and flips follow torchvision's ``RandomResizedCrop`` then ``RandomHorizontalFlip`` exactly,
drawing from torch's RNG in the same order, so DataLoader worker seeding applies as usual.
Optional libjpeg-turbo decoders (simplejpeg, PyTurboJPEG) are not used: draft is the built-in path.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Final, TypeAlias

import numpy as np
import torch
from PIL import Image

from packer.imagecheck import pixel_limit_lifted

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "CenterCropResize",
    "Normalize",
    "RandomResizedCropFlip",
    "center_crop_box",
    "crop_resize",
    "random_resized_crop_params",
    "to_uint8_tensor",
]

IMAGENET_MEAN: Final[tuple[float, float, float]] = (0.485, 0.456, 0.406)
IMAGENET_STD: Final[tuple[float, float, float]] = (0.229, 0.224, 0.225)

#: What a transform takes: a PIL image (``decode=True``) or encoded bytes (``decode=False``).
Sample: TypeAlias = Image.Image | bytes | bytearray | memoryview
Box: TypeAlias = tuple[float, float, float, float]

_DRAFT_SCALES: Final = (8, 4, 2)


def _pair(size: int | Sequence[int], name: str) -> tuple[int, int]:
    """``(height, width)`` from an int or a pair, as torchvision reads ``size``."""
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(isinstance(v, int) and v > 0 for v in pair):
        raise ValueError(f"{name} must be a positive int or a (height, width) pair, not {size!r}")
    return pair[0], pair[1]


def _range(value: Sequence[float], name: str) -> tuple[float, float]:
    low, high = (float(v) for v in value)
    if not 0 < low <= high:
        raise ValueError(f"{name} must be (low, high) with 0 < low <= high, not {tuple(value)!r}")
    return low, high


def _check_gap(draft_gap: float) -> float:
    if not draft_gap >= 1.0:
        raise ValueError(f"draft_gap must be 1.0 or more, not {draft_gap!r}")
    return float(draft_gap)


@contextmanager
def _opened(sample: Sample) -> Iterator[tuple[Image.Image, bool]]:
    """The image, not yet decoded when given bytes, and whether draft may be used on it."""
    if isinstance(sample, Image.Image):
        yield sample, False
        return
    if not isinstance(sample, bytes | bytearray | memoryview):
        raise TypeError(f"expected a PIL image or encoded bytes, not {type(sample).__name__}")
    # Conversion vetted every stored image against its own pixel limit, as decode=True trusts.
    with pixel_limit_lifted(), Image.open(io.BytesIO(sample)) as image:
        yield image, True


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


def _fused(image: Image.Image, box: Box, size: tuple[int, int], *, flip: bool, draft: bool,
           draft_gap: float) -> torch.Tensor:
    """Draft (if allowed), convert odd modes, one box resize, flip, tensor."""
    out_h, out_w = size
    if draft and (scale := _draft_scale(box, out_w, out_h, draft_gap)) > 1:
        width, height = image.size
        applied = image.draft("RGB", (width // scale, height // scale))
        if applied is not None:
            fx, fy = width / applied[1][2], height / applied[1][3]
            box = (box[0] / fx, box[1] / fy, min(box[2] / fx, image.width), min(box[3] / fy, image.height))
    if image.mode not in ("RGB", "L"):  # resizing P, RGBA, CMYK, I;16... differs from converting first
        image = image.convert("RGB")
    resized = image.resize((out_w, out_h), Image.Resampling.BILINEAR, box=box)
    return to_uint8_tensor(resized, flip=flip)


def _check_box(box: Sequence[float], width: int, height: int) -> Box:
    left, top, right, bottom = (float(v) for v in box)
    if not (0 <= left < right <= width and 0 <= top < bottom <= height):
        raise ValueError(f"box {tuple(box)!r} is not a non-empty region of the {width}x{height} image")
    return left, top, right, bottom


def crop_resize(sample: Sample, box: Sequence[float], size: int | Sequence[int], *, flip: bool = False,
                draft_gap: float = 1.0) -> torch.Tensor:
    """Crop ``box`` and resize it to ``size`` in one pass; the fused op both transforms use.

    Args:
        sample: A PIL image or the encoded bytes of one.
        box: ``(left, top, right, bottom)`` in source pixels, as PIL's (floats allowed).
        size: Output ``(height, width)``, or an int for a square, as torchvision's.
        flip: Mirror the result left to right.
        draft_gap: JPEG bytes decode at the smallest 1/2, 1/4 or 1/8 scale that keeps the crop at
            least this many times the output size; ``math.inf`` never drafts.

    Returns:
        A contiguous ``uint8`` tensor of shape ``(3, height, width)``.

    Raises:
        ValueError: ``box`` is not inside the image, or ``size`` is not positive.
        TypeError: ``sample`` is neither a PIL image nor bytes.
    """
    out = _pair(size, "size")
    gap = _check_gap(draft_gap)
    with _opened(sample) as (image, draft):
        checked = _check_box(box, *image.size)
        return _fused(image, checked, out, flip=flip, draft=draft, draft_gap=gap)


def random_resized_crop_params(width: int, height: int, scale: tuple[float, float] = (0.08, 1.0),
                               ratio: tuple[float, float] = (3 / 4, 4 / 3),
                               generator: torch.Generator | None = None) -> tuple[int, int, int, int]:
    """torchvision's ``RandomResizedCrop.get_params``, restated: ``(top, left, height, width)``.

    Same draws from the same RNG (torch's global one unless ``generator``): ten tries at a
    random area and log-uniform aspect ratio, else a central crop clamped to ``ratio``.
    """
    area = height * width
    log_low, log_high = torch.log(torch.tensor(ratio)).tolist()  # float32, as torchvision
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1], generator=generator).item()
        aspect = torch.exp(torch.empty(1).uniform_(log_low, log_high, generator=generator)).item()
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            i = int(torch.randint(0, height - h + 1, size=(1,), generator=generator).item())
            j = int(torch.randint(0, width - w + 1, size=(1,), generator=generator).item())
            return i, j, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        w, h = round(height * max(ratio)), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class RandomResizedCropFlip:
    """Training transform: ``RandomResizedCrop(size)`` + ``RandomHorizontalFlip(flip_p)``, fused.

    Args:
        size: Output ``(height, width)``, or an int for a square.
        scale: Range of the crop's area as a fraction of the image's.
        ratio: Range of the crop's aspect ratio (width / height), sampled log-uniformly.
        flip_p: Probability of mirroring left to right.
        draft_gap: See :func:`crop_resize`; 2.0 is closer to a full decode, 1.0 faster.
        generator: A seeded ``torch.Generator`` for reproducible draws in one process. Leave it
            ``None`` in DataLoader workers, whose global RNGs are seeded apart; copies of one
            generator would draw the same crops in every worker.

    Calling it on a PIL image or encoded bytes returns a ``uint8`` ``(3, height, width)`` tensor.
    """

    def __init__(self, size: int | Sequence[int], scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3), flip_p: float = 0.5, *,
                 draft_gap: float = 1.0, generator: torch.Generator | None = None) -> None:
        if not 0.0 <= flip_p <= 1.0:
            raise ValueError(f"flip_p must be a probability in [0, 1], not {flip_p!r}")
        self.size = _pair(size, "size")
        self.scale = _range(scale, "scale")
        self.ratio = _range(ratio, "ratio")
        self.flip_p = float(flip_p)
        self.draft_gap = _check_gap(draft_gap)
        self.generator = generator

    def get_params(self, width: int, height: int) -> tuple[int, int, int, int]:
        """``(top, left, height, width)`` of a random crop of a ``width`` x ``height`` image."""
        return random_resized_crop_params(width, height, self.scale, self.ratio, self.generator)

    def __call__(self, sample: Sample) -> torch.Tensor:
        with _opened(sample) as (image, draft):
            i, j, h, w = self.get_params(*image.size)
            flip = torch.rand(1, generator=self.generator).item() < self.flip_p
            return _fused(image, (j, i, j + w, i + h), self.size, flip=flip, draft=draft,
                          draft_gap=self.draft_gap)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(size={self.size}, scale={self.scale}, ratio={self.ratio}, "
                f"flip_p={self.flip_p}, draft_gap={self.draft_gap})")


def center_crop_box(width: int, height: int, size: int | Sequence[int] = 224, resize: int = 256) -> Box:
    """The source box that torchvision's ``Resize(resize)`` + ``CenterCrop(size)`` keeps.

    ``Resize`` takes the short side to ``resize`` and the long one to
    ``int(resize * long / short)``; ``CenterCrop`` offsets by ``round((side - crop) / 2)``.
    """
    crop_h, crop_w = _pair(size, "size")
    if width <= height:
        new_w, new_h = resize, int(resize * height / width)
    else:
        new_w, new_h = int(resize * width / height), resize
    if crop_h > new_h or crop_w > new_w:
        raise ValueError(f"crop {crop_h}x{crop_w} is larger than the resized {new_h}x{new_w} image")
    top, left = round((new_h - crop_h) / 2.0), round((new_w - crop_w) / 2.0)
    fx, fy = width / new_w, height / new_h
    return left * fx, top * fy, min((left + crop_w) * fx, width), min((top + crop_h) * fy, height)


class CenterCropResize:
    """Evaluation transform: ``Resize(resize)`` + ``CenterCrop(size)`` as one box resize.

    Args:
        size: Output ``(height, width)``, or an int for a square.
        resize: The short side before cropping; at least the crop.
        draft_gap: See :func:`crop_resize`.
    """

    def __init__(self, size: int | Sequence[int] = 224, resize: int = 256, *, draft_gap: float = 1.0) -> None:
        self.size = _pair(size, "size")
        if not isinstance(resize, int) or resize < max(self.size):
            raise ValueError(f"resize must be an int no smaller than the crop {self.size}, not {resize!r}")
        self.resize = resize
        self.draft_gap = _check_gap(draft_gap)

    def __call__(self, sample: Sample) -> torch.Tensor:
        with _opened(sample) as (image, draft):
            box = center_crop_box(*image.size, self.size, self.resize)
            return _fused(image, box, self.size, flip=False, draft=draft, draft_gap=self.draft_gap)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size}, resize={self.resize}, draft_gap={self.draft_gap})"


class Normalize(torch.nn.Module):
    """Batch normalisation of ``uint8`` images: ``(x / 255 - mean) / std`` as ``x * scale + shift``.

    Takes ``(..., C, H, W)`` ``uint8`` on any device; its constants follow the input there on
    first use. Returns ``dtype`` (float32 unless told), computed in float32.
    """

    scale: torch.Tensor
    shift: torch.Tensor

    def __init__(self, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD, *,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        if len(mean) != len(std) or not mean or any(s <= 0 for s in std):
            raise ValueError(f"mean and std need one value per channel, std > 0: {mean!r}, {std!r}")
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating point type, not {dtype}")
        self.mean, self.std, self.dtype = tuple(map(float, mean)), tuple(map(float, std)), dtype
        scale = [1.0 / (255.0 * s) for s in self.std]
        shift = [-m / s for m, s in zip(self.mean, self.std, strict=True)]
        self.register_buffer("scale", torch.tensor(scale).view(-1, 1, 1), persistent=False)
        self.register_buffer("shift", torch.tensor(shift).view(-1, 1, 1), persistent=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Normalise ``images``; raises ValueError unless ``uint8`` with ``len(mean)`` channels."""
        if images.dtype != torch.uint8:
            raise ValueError(f"Normalize takes uint8 images (0-255), not {images.dtype}")
        if images.dim() < 3 or images.shape[-3] != len(self.mean):
            raise ValueError(f"expected (..., {len(self.mean)}, H, W) images, "
                             f"not shape {tuple(images.shape)}")
        if self.scale.device != images.device:
            self.to(images.device)
        # One conversion then two in-place ops: on the CPU, twice as fast as addcmul on uint8.
        out = images.to(torch.float32).mul_(self.scale).add_(self.shift)
        return out if self.dtype == torch.float32 else out.to(self.dtype)

    def extra_repr(self) -> str:
        return f"mean={self.mean}, std={self.std}, dtype={self.dtype}"
