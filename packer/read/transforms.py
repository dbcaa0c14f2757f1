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

The decoding, cropping and resizing happen in one fused step, :func:`packer.read.crop_resize.crop_resize`
(reduced JPEG decodes, ``pixels`` records read in place, an OpenCV, torch or PIL resampler);
see there. Both transforms are batch transforms (:class:`BatchTransform`): a packed dataset hands them a whole
batch of stored records at once (``decode=False``) and gets one ``(B, 3, H, W)`` tensor back,
with no per-sample tensors to collate; the pixels and random draws are those of calling the
transform sample by sample.

Crops and flips follow torchvision's ``RandomResizedCrop`` then ``RandomHorizontalFlip`` exactly,
drawing from torch's RNG in the same order, so DataLoader worker seeding applies as usual.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import torch

from packer.read.crop_params import (
    center_crop_box,
    center_crop_geometry,
    random_resized_crop_params,
    size_pair,
)
from packer.read.crop_resize import Sample, check_gap, crop_resize, reduction, render, to_uint8_tensor
from packer.read.decoding import DECODERS, Picture, open_picture, resolve_decoder
from packer.read.normalize import IMAGENET_MEAN, IMAGENET_STD, Normalize
from packer.read.resampling import RESAMPLERS, resize_into, resolve_resampler

__all__ = [
    "DECODERS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "RESAMPLERS",
    "BatchTransform",
    "CenterCropResize",
    "Normalize",
    "RandomResizedCropFlip",
    "center_crop_box",
    "crop_resize",
    "random_resized_crop_params",
    "to_uint8_tensor",
]


def _range(value: Sequence[float], name: str) -> tuple[float, float]:
    low, high = (float(v) for v in value)
    if not 0 < low <= high:
        raise ValueError(f"{name} must be (low, high) with 0 < low <= high, not {tuple(value)!r}")
    return low, high


class BatchTransform(ABC):
    """A transform that can also take a whole batch of samples in one call.

    A packed dataset opened with ``decode=False`` gives such a transform each DataLoader batch
    of stored records at once (:meth:`batch`) instead of one record at a time. Subclass it to
    opt in; the samples it receives may be views that are valid only during the call.
    """

    size: tuple[int, int]

    @abstractmethod
    def into(self, sample: Sample, out: np.ndarray) -> None:
        """Write the transformed ``sample`` into ``out``, a C-contiguous ``uint8`` ``(3, *size)`` array."""

    def __call__(self, sample: Sample) -> torch.Tensor:
        out = torch.empty((3, *self.size), dtype=torch.uint8)
        self.into(sample, out.numpy())
        return out

    def batch(self, samples: Sequence[Sample], out: torch.Tensor | None = None) -> torch.Tensor:
        """The ``(len(samples), 3, *size)`` ``uint8`` batch, equal to stacking the samples'
        calls one by one (the same random draws, in order), written into ``out`` if given."""
        if out is None:
            out = torch.empty((len(samples), 3, *self.size), dtype=torch.uint8)
        elif (out.shape != (len(samples), 3, *self.size) or out.dtype != torch.uint8
              or out.device.type != "cpu" or not out.is_contiguous()):
            raise ValueError(f"out must be a contiguous uint8 CPU tensor of shape "
                             f"{(len(samples), 3, *self.size)}, not {out.dtype} {tuple(out.shape)}")
        rows = out.numpy()
        for position, sample in enumerate(samples):
            self.into(sample, rows[position])
        return out


class _Fused(BatchTransform):
    """What both fused transforms share: the decoder, resampler and draft gap, resolved once."""

    def __init__(self, size: int | Sequence[int], *, draft_gap: float, resampler: str, decoder: str) -> None:
        self.size = size_pair(size, "size")
        self.draft_gap = check_gap(draft_gap)
        self.resampler = resolve_resampler(resampler)
        self.decoder = resolve_decoder(decoder)

    def into(self, sample: Sample, out: np.ndarray) -> None:
        picture = open_picture(sample, self.decoder)
        try:
            self._render(picture, out)
        finally:
            picture.close()

    @abstractmethod
    def _render(self, picture: Picture, out: np.ndarray) -> None:
        """Crop and resize ``picture`` into ``out``."""


class RandomResizedCropFlip(_Fused):
    """Training transform: ``RandomResizedCrop(size)`` + ``RandomHorizontalFlip(flip_p)``, fused.

    Args:
        size: Output ``(height, width)``, or an int for a square.
        scale: Range of the crop's area as a fraction of the image's.
        ratio: Range of the crop's aspect ratio (width / height), sampled log-uniformly.
        flip_p: Probability of mirroring left to right.
        draft_gap: See :func:`crop_resize`: 2.0 stays within a level or so of a full decode,
            1.0 is faster on large JPEGs and further off.
        resampler: ``"auto"`` (OpenCV when installed, else torch), ``"opencv"``, ``"torch"``
            or ``"pil"``; see :mod:`packer.read.resampling`. Resolved when the transform is made.
        decoder: ``"auto"`` (simplejpeg when installed, else Pillow), ``"simplejpeg"`` or
            ``"pil"``; the same pixels either way. Resolved when the transform is made.
        generator: A seeded ``torch.Generator`` for reproducible draws in one process. Leave it
            ``None`` in DataLoader workers, whose global RNGs are seeded apart; copies of one
            generator would draw the same crops in every worker.

    Calling it on a PIL image or encoded bytes returns a ``uint8`` ``(3, height, width)`` tensor.

    Raises:
        MissingExtraError: ``"opencv"`` or ``"simplejpeg"`` is named and not installed.
    """

    def __init__(self, size: int | Sequence[int], scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3 / 4, 4 / 3), flip_p: float = 0.5, *,
                 draft_gap: float = 2.0, resampler: str = "auto", decoder: str = "auto",
                 generator: torch.Generator | None = None) -> None:
        if not 0.0 <= flip_p <= 1.0:
            raise ValueError(f"flip_p must be a probability in [0, 1], not {flip_p!r}")
        super().__init__(size, draft_gap=draft_gap, resampler=resampler, decoder=decoder)
        self.scale = _range(scale, "scale")
        self.ratio = _range(ratio, "ratio")
        self.flip_p = float(flip_p)
        self.generator = generator

    def get_params(self, width: int, height: int) -> tuple[int, int, int, int]:
        """``(top, left, height, width)`` of a random crop of a ``width`` x ``height`` image."""
        return random_resized_crop_params(width, height, self.scale, self.ratio, self.generator)

    def _render(self, picture: Picture, out: np.ndarray) -> None:
        i, j, h, w = self.get_params(picture.width, picture.height)
        flip = torch.rand(1, generator=self.generator).item() < self.flip_p
        render(picture, (j, i, j + w, i + h), out, flip=flip, draft_gap=self.draft_gap,
               resampler=self.resampler)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(size={self.size}, scale={self.scale}, ratio={self.ratio}, "
                f"flip_p={self.flip_p}, draft_gap={self.draft_gap}, resampler={self.resampler!r}, "
                f"decoder={self.decoder!r})")


class CenterCropResize(_Fused):
    """Evaluation transform: ``Resize(resize)`` + ``CenterCrop(size)``.

    With ``resampler="pil"`` it is one box resize of the crop; otherwise the (maybe reduced)
    image is resized whole, then cropped, as torchvision does, so that the crop's border sees
    its neighbours (the crop is most of the image: resizing it all costs little).

    Args:
        size: Output ``(height, width)``, or an int for a square.
        resize: The short side before cropping; at least the crop.
        draft_gap: As for :class:`RandomResizedCropFlip`.
        resampler: As for :class:`RandomResizedCropFlip`.
        decoder: As for :class:`RandomResizedCropFlip`.
    """

    def __init__(self, size: int | Sequence[int] = 224, resize: int = 256, *, draft_gap: float = 2.0,
                 resampler: str = "auto", decoder: str = "auto") -> None:
        super().__init__(size, draft_gap=draft_gap, resampler=resampler, decoder=decoder)
        if not isinstance(resize, int) or resize < max(self.size):
            raise ValueError(f"resize must be an int no smaller than the crop {self.size}, not {resize!r}")
        self.resize = resize

    def _render(self, picture: Picture, out: np.ndarray) -> None:
        width, height = picture.width, picture.height
        box = center_crop_box(width, height, self.size, self.resize)
        if self.resampler == "pil":
            render(picture, box, out, flip=False, draft_gap=self.draft_gap, resampler="pil")
            return
        reduce = reduction(box, self.size, self.draft_gap) if picture.reducible else 1
        pixels, _ = picture.pixels(reduce)
        resized, (left, top, right, bottom) = center_crop_geometry(width, height, self.size, self.resize)
        whole = np.empty((3, *resized), dtype=np.uint8)
        resize_into(pixels, whole, flip=False, resampler=self.resampler)
        out[...] = whole[:, top:bottom, left:right]

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(size={self.size}, resize={self.resize}, draft_gap={self.draft_gap}, "
                f"resampler={self.resampler!r}, decoder={self.decoder!r})")
