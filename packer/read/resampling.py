"""Resize a ``uint8`` RGB crop to the output size: OpenCV, torch or Pillow (:data:`RESAMPLERS`).

torchvision resizes PIL images with Pillow's bilinear filter, antialiased (its support widens
with the shrink factor). The three resamplers, from fastest to closest:

* ``"opencv"`` (the ``fast`` extra): OpenCV's bilinear ``INTER_LINEAR`` where the crop is
  enlarged on both axes (there Pillow's filter is plain bilinear too, and OpenCV's agrees within
  rounding, at 0.35-0.4x of torch's cost: scripts/bench_opencv.py), torch's kernel wherever it
  shrinks. OpenCV has no filter that follows Pillow's when shrinking: ``INTER_LINEAR`` aliases
  (1.6 levels off on average, even at shrink factors below 1.25), and ``INTER_AREA`` is a box
  filter, further off (1.5 levels) and slower than torch's for non-integer factors (measured on photos).
* ``"torch"``: torch's antialiased bilinear ``uint8`` kernel, which follows Pillow's filter
  (within a level or two) at about half its cost. The default without the extra.
* ``"pil"``: Pillow itself, sub-pixel crop box included (see :mod:`packer.read.crop_resize`).

The crop is a view of whole pixels; both array resamplers clamp at its edge, as torchvision's
crop-then-resize does.
"""

from __future__ import annotations

import threading
import warnings
from typing import Final

import numpy as np
import torch

from packer.read import speedups

__all__ = ["RESAMPLERS", "interpolate", "resize_into", "resolve_resampler"]

#: How the crop is resized: OpenCV where it is enlarged (fastest), torch's antialiased kernel,
#: or Pillow's.
RESAMPLERS: Final[tuple[str, ...]] = ("opencv", "torch", "pil")

_scratch = threading.local()

# torch warns (once per process) that a tensor over a read-only array must not be written to;
# these tensors (over pixels records) are only read. One filter, scoped to this module, rather
# than catch_warnings around every image in a DataLoader worker.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning,
                        module=r"packer\.read\.resampling")


def resolve_resampler(resampler: str) -> str:
    """``"auto"`` becomes ``"opencv"`` when OpenCV is installed, else ``"torch"``.

    Raises:
        ValueError: an unknown name.
        MissingExtraError: ``"opencv"`` is asked for and OpenCV is not installed.
    """
    return speedups.resolve_choice("resampler", resampler, RESAMPLERS, fast="opencv", module="cv2",
                                   fallback="torch")


def interpolate(chw: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Antialiased bilinear resize of a ``CHW`` ``uint8`` tensor (any strides) to ``size``."""
    return torch.nn.functional.interpolate(chw.unsqueeze(0), size=size, mode="bilinear",
                                           antialias=True, align_corners=False)[0]


def _hwc_scratch(height: int, width: int) -> np.ndarray:
    """A per-thread ``(height, width, 3)`` buffer, reused so each image costs no fresh pages."""
    buffers: dict[tuple[int, int], np.ndarray] | None = getattr(_scratch, "buffers", None)
    if buffers is None:
        buffers = _scratch.buffers = {}
    found = buffers.get((height, width))
    if found is None:
        found = buffers[height, width] = np.empty((height, width, 3), dtype=np.uint8)
    return found


def _opencv_into(crop: np.ndarray, out: np.ndarray, flip: bool) -> None:
    """Resize ``crop`` into ``out``: OpenCV's bilinear filter where it is enlarged (into an HWC
    scratch, mirrored and split into planes by OpenCV), torch's antialiased kernel where it
    shrinks (its result is already planar)."""
    cv2 = speedups.opencv()
    if cv2 is None:
        cv2 = speedups.require("cv2", "resampler='opencv'")
    height, width = out.shape[1:]
    if crop.shape[0] > height or crop.shape[1] > width:
        planar = interpolate(torch.from_numpy(crop).permute(2, 0, 1), (height, width)).numpy()
        np.copyto(out, planar[:, :, ::-1] if flip else planar)
        return
    resized = _hwc_scratch(height, width)
    cv2.resize(crop, (width, height), dst=resized, interpolation=cv2.INTER_LINEAR)
    if flip:
        cv2.flip(resized, 1, dst=resized)
    cv2.split(resized, [out[0], out[1], out[2]])  # HWC -> CHW, straight into ``out``


def resize_into(crop: np.ndarray, out: np.ndarray, *, flip: bool, resampler: str) -> None:
    """Resize the ``HWC`` ``crop`` (any strides) into ``out``, a C-contiguous ``uint8``
    ``(3, height, width)`` array, mirrored left to right if ``flip``.

    ``resampler`` is ``"opencv"`` (which hands a shrinking crop to torch) or ``"torch"``
    (``"pil"`` needs the whole picture and box: :func:`packer.read.crop_resize.crop_resize`).
    """
    if resampler == "opencv":
        _opencv_into(crop, out, flip)
        return
    chw = torch.from_numpy(crop).permute(2, 0, 1)
    if tuple(chw.shape[1:]) != tuple(out.shape[1:]):
        chw = interpolate(chw, (out.shape[1], out.shape[2]))
    torch.from_numpy(out).copy_(chw.flip(-1) if flip else chw)
