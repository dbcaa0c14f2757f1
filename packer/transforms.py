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

The decoding, cropping and resizing happen in one fused step, :func:`packer.crop_resize.crop_resize`
(JPEG draft scaling, ``pixels`` records read in place, a torch or PIL resampler); see there.

Crops and flips follow torchvision's ``RandomResizedCrop`` then ``RandomHorizontalFlip`` exactly,
drawing from torch's RNG in the same order, so DataLoader worker seeding applies as usual.
Optional libjpeg-turbo decoders (simplejpeg, PyTurboJPEG) are not used: draft is the built-in path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

import torch

from packer.crop_resize import (
    RESAMPLERS,
    Box,
    Sample,
    check_gap,
    check_resampler,
    crop_resize,
    drafted,
    fused,
    hwc_tensor,
    image_size,
    interpolate,
    opened,
    size_pair,
    to_uint8_tensor,
)

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "RESAMPLERS",
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


def _range(value: Sequence[float], name: str) -> tuple[float, float]:
    low, high = (float(v) for v in value)
    if not 0 < low <= high:
        raise ValueError(f"{name} must be (low, high) with 0 < low <= high, not {tuple(value)!r}")
    return low, high


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
        resampler: See :func:`crop_resize`: ``"torch"`` (faster) or ``"pil"``.
        generator: A seeded ``torch.Generator`` for reproducible draws in one process. Leave it
            ``None`` in DataLoader workers, whose global RNGs are seeded apart; copies of one
            generator would draw the same crops in every worker.

    Calling it on a PIL image or encoded bytes returns a ``uint8`` ``(3, height, width)`` tensor.
    """

    def __init__(self, size: int | Sequence[int], scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3), flip_p: float = 0.5, *,
                 draft_gap: float = 1.0, resampler: str = "torch",
                 generator: torch.Generator | None = None) -> None:
        if not 0.0 <= flip_p <= 1.0:
            raise ValueError(f"flip_p must be a probability in [0, 1], not {flip_p!r}")
        self.size = size_pair(size, "size")
        self.scale = _range(scale, "scale")
        self.ratio = _range(ratio, "ratio")
        self.flip_p = float(flip_p)
        self.draft_gap = check_gap(draft_gap)
        self.resampler = check_resampler(resampler)
        self.generator = generator

    def get_params(self, width: int, height: int) -> tuple[int, int, int, int]:
        """``(top, left, height, width)`` of a random crop of a ``width`` x ``height`` image."""
        return random_resized_crop_params(width, height, self.scale, self.ratio, self.generator)

    def __call__(self, sample: Sample) -> torch.Tensor:
        with opened(sample) as (image, draft):
            i, j, h, w = self.get_params(*image_size(image))
            flip = torch.rand(1, generator=self.generator).item() < self.flip_p
            return fused(image, (j, i, j + w, i + h), self.size, flip=flip, draft=draft,
                          draft_gap=self.draft_gap, resampler=self.resampler)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(size={self.size}, scale={self.scale}, ratio={self.ratio}, "
                f"flip_p={self.flip_p}, draft_gap={self.draft_gap}, resampler={self.resampler!r})")


def _center_crop_geometry(width: int, height: int, size: int | Sequence[int],
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
    (new_h, new_w), (left, top, right, bottom) = _center_crop_geometry(width, height, size, resize)
    fx, fy = width / new_w, height / new_h
    return left * fx, top * fy, min(right * fx, width), min(bottom * fy, height)


class CenterCropResize:
    """Evaluation transform: ``Resize(resize)`` + ``CenterCrop(size)``.

    With ``resampler="pil"`` it is one box resize of the crop; with ``"torch"`` the (maybe
    drafted) image is resized whole, then cropped, as torchvision does, so that the crop's
    border sees its neighbours (the crop is most of the image: resizing it all costs little).

    Args:
        size: Output ``(height, width)``, or an int for a square.
        resize: The short side before cropping; at least the crop.
        draft_gap: See :func:`crop_resize`.
        resampler: See :func:`crop_resize`: ``"torch"`` (faster) or ``"pil"``.
    """

    def __init__(self, size: int | Sequence[int] = 224, resize: int = 256, *, draft_gap: float = 1.0,
                 resampler: str = "torch") -> None:
        self.size = size_pair(size, "size")
        if not isinstance(resize, int) or resize < max(self.size):
            raise ValueError(f"resize must be an int no smaller than the crop {self.size}, not {resize!r}")
        self.resize = resize
        self.draft_gap = check_gap(draft_gap)
        self.resampler = check_resampler(resampler)

    def __call__(self, sample: Sample) -> torch.Tensor:
        with opened(sample) as (image, draft):
            width, height = image_size(image)
            box = center_crop_box(width, height, self.size, self.resize)
            if self.resampler == "pil":
                return fused(image, box, self.size, flip=False, draft=draft, draft_gap=self.draft_gap,
                              resampler="pil")
            image, _ = drafted(image, box, self.size, draft=draft, draft_gap=self.draft_gap)
            resized, (left, top, right, bottom) = _center_crop_geometry(width, height, self.size, self.resize)
            whole = hwc_tensor(image).permute(2, 0, 1)
            if tuple(whole.shape[1:]) != resized:
                whole = interpolate(whole, resized)
            return whole[:, top:bottom, left:right].contiguous()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(size={self.size}, resize={self.resize}, draft_gap={self.draft_gap}, "
                f"resampler={self.resampler!r})")


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

    def forward(self, images: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Normalise ``images``, into ``out`` when given (its shape, ``dtype``, on its device).

        Passing the same ``out`` every step spares the allocation, which on the CPU costs more
        than the arithmetic: a batch of 64 float32 224x224 images is 38 MB, above glibc's
        largest mmap threshold (32 MB), so each new one is fresh pages, faulted in and zeroed
        (measured: 0.41 ms per image allocating, 0.08 ms into a reused buffer). Reuse it only
        once the previous batch is no longer needed (after the optimizer step).

        Raises:
            ValueError: ``images`` is not ``uint8`` with ``len(mean)`` channels, or ``out`` does
                not match it.
        """
        if images.dtype != torch.uint8:
            raise ValueError(f"Normalize takes uint8 images (0-255), not {images.dtype}")
        if images.dim() < 3 or images.shape[-3] != len(self.mean):
            raise ValueError(f"expected (..., {len(self.mean)}, H, W) images, "
                             f"not shape {tuple(images.shape)}")
        if out is not None and (out.shape != images.shape or out.dtype != self.dtype
                                or out.device != images.device):
            raise ValueError(f"out must be a {self.dtype} tensor of shape {tuple(images.shape)} on "
                             f"{images.device}, not {out.dtype} {tuple(out.shape)} on {out.device}")
        if self.scale.device != images.device:
            self.to(images.device)
        if out is not None and self.dtype == torch.float32:
            # Conversion by copy, then two in-place ops: no temporary at all.
            return out.copy_(images).mul_(self.scale).add_(self.shift)
        # One conversion then two in-place ops: on the CPU, twice as fast as addcmul on uint8.
        result = images.to(torch.float32).mul_(self.scale).add_(self.shift)
        if out is not None:
            return out.copy_(result)
        return result if self.dtype == torch.float32 else result.to(self.dtype)

    def extra_repr(self) -> str:
        return f"mean={self.mean}, std={self.std}, dtype={self.dtype}"
