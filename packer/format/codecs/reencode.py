"""What the codecs that decode at conversion time share (``jpeg``, ``pixels``), so reading costs less.

Both turn the source into RGB exactly as ImageFolder's loader does (``convert("RGB")``, no
EXIF rotation), then optionally shrink it so that its short side is ``resize`` pixels (aspect
kept, never enlarged; like FFCV's ``max_resolution`` but on the short side, which is what a
``RandomResizedCrop(224)`` or ``Resize(256)`` pipeline looks at):

* ``jpeg``: re-encoded as baseline JPEG at ``quality`` (4:2:0 chroma, as most photos are);
  smaller and faster to decode than the originals when they are large.
* ``pixels``: stored decoded, ``uint8`` RGB rows (HWC) after a 12-byte header ``b"PKPX"``,
  width, height (little-endian uint32): nothing to decode at read time, at the cost of space.

JPEG sources are decoded with Pillow's ``draft`` (DCT-domain downscaling by 1/2, 1/4 or 1/8)
whenever the target size allows, then resized with a Lanczos filter.
"""

from __future__ import annotations

import struct

from PIL import Image

from packer.source.imagecheck import decoder_failures, open_image, pixel_limit_lifted, unpackable

__all__ = ["PIXELS_HEADER", "check_resize", "decoded_rgb", "planned_size", "target_size"]

#: A ``pixels`` record's header: magic ``b"PKPX"``, width, height (little-endian uint32).
PIXELS_HEADER = struct.Struct("<4sII")


def target_size(width: int, height: int, resize: int | None) -> tuple[int, int]:
    """Size with the short side brought down to ``resize`` (aspect kept; never enlarged)."""
    if resize is None or min(width, height) <= resize:
        return width, height
    if width <= height:
        return resize, max(1, round(height * resize / width))
    return max(1, round(width * resize / height)), resize


def decoded_rgb(data: bytes, *, max_pixels: int, resize: int | None) -> Image.Image:
    """Decode to RGB as ImageFolder does, shrunk so the short side is at most ``resize``."""
    with pixel_limit_lifted():
        image = open_image(data, max_pixels=max_pixels)
        size = target_size(*image.size, resize)
        with decoder_failures(unpackable):
            if size != image.size and image.format == "JPEG":
                image.draft("RGB", size)  # decode at the smallest 1/2^k scale still >= size
            rgb = image.convert("RGB")
    if rgb.size != size:
        rgb = rgb.resize(size, Image.Resampling.LANCZOS)
    return rgb


def check_resize(resize: int | None) -> None:
    """Refuse a ``resize`` that is not a positive number of pixels (ValueError)."""
    if resize is not None and (not isinstance(resize, int) or resize < 1):
        raise ValueError(f"resize must be a positive number of pixels, not {resize!r}")


def planned_size(image_size: tuple[int, int] | None, resize: int | None, size: int,
             bytes_per_pixel: float | None) -> int:
    """Planned stored bytes: exact for raw pixels, else the source bytes scaled by pixels kept."""
    if image_size is None:
        return size
    width, height = target_size(*image_size, resize)
    if bytes_per_pixel is None:  # re-encoded: scale the source bytes by the pixels kept
        return max(1, size * width * height // max(1, image_size[0] * image_size[1]))
    return int(width * height * bytes_per_pixel) + PIXELS_HEADER.size
