"""Batch normalisation of ``uint8`` images: the step the fast path moves out of the workers.

One :class:`Normalize` per batch, where the batch lands: on the GPU in training (one fused
pass there), or in the main process on the CPU, where it is memory-bound: a float32 batch is
four times the bytes of the ``uint8`` one. On the CPU it therefore works through the batch a
few images at a time, so each image's float copy is scaled and shifted while it is still in
the core's cache (measured on 2 cores: 0.11 ms per 224x224 image, against 0.20 ms for three
passes over the whole batch), and it writes into a caller's buffer when given one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import torch

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "Normalize"]

IMAGENET_MEAN: Final[tuple[float, float, float]] = (0.485, 0.456, 0.406)
IMAGENET_STD: Final[tuple[float, float, float]] = (0.229, 0.224, 0.225)

#: Float bytes normalised per step on the CPU: about what stays in a core's L2 cache.
_CPU_CHUNK_BYTES: Final = 2 << 20


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
        largest mmap threshold (32 MB), so each new one is fresh pages, faulted in and zeroed.
        Reuse it only once the previous batch is no longer needed (after the optimizer step).

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
        if self.dtype != torch.float32:
            # Computed in float32, then converted once.
            result = images.to(torch.float32).mul_(self.scale).add_(self.shift).to(self.dtype)
            return result if out is None else out.copy_(result)
        if out is None:
            out = torch.empty(images.shape, dtype=torch.float32, device=images.device)
        if images.device.type != "cpu" or images.dim() == 3:
            return out.copy_(images).mul_(self.scale).add_(self.shift)
        return self._in_cache(images, out)

    def _in_cache(self, images: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Conversion by copy, then two in-place ops, a few images at a time (see the module doc)."""
        flat_in = images.reshape(-1, *images.shape[-3:])
        flat_out = out.view(-1, *out.shape[-3:]) if out.is_contiguous() else None
        if flat_out is None:
            return out.copy_(images).mul_(self.scale).add_(self.shift)
        step = max(1, _CPU_CHUNK_BYTES // max(1, flat_out[0].numel() * 4))
        for first in range(0, len(flat_in), step):
            chunk = flat_out[first:first + step]
            chunk.copy_(flat_in[first:first + step]).mul_(self.scale).add_(self.shift)
        return out

    def extra_repr(self) -> str:
        return f"mean={self.mean}, std={self.std}, dtype={self.dtype}"
