"""Codecs that decode at conversion time so that reading costs less: ``jpeg`` and ``pixels``.

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

import io
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from PIL import Image

from packer.source.imagecheck import open_image, pixel_limit_lifted, unpackable

__all__ = ["JpegCodec", "PixelsCodec", "pixels_array", "target_size"]

_PIXELS_HEADER = struct.Struct("<4sII")
_PIXELS_MAGIC = b"PKPX"


def target_size(width: int, height: int, resize: int | None) -> tuple[int, int]:
    """Size with the short side brought down to ``resize`` (aspect kept; never enlarged)."""
    if resize is None or min(width, height) <= resize:
        return width, height
    if width <= height:
        return resize, max(1, round(height * resize / width))
    return max(1, round(width * resize / height)), resize


def pixels_array(data: bytes | bytearray | memoryview) -> np.ndarray | None:
    """A read-only ``uint8`` ``(height, width, 3)`` view of a ``pixels`` record, no copy;
    ``None`` when ``data`` is not one (an encoded image: no format starts with ``PKPX`` and
    has exactly the record's length)."""
    if len(data) < _PIXELS_HEADER.size:
        return None
    magic, width, height = _PIXELS_HEADER.unpack_from(data)
    if magic != _PIXELS_MAGIC or len(data) != _PIXELS_HEADER.size + width * height * 3:
        return None
    pixels = np.frombuffer(data, dtype=np.uint8, offset=_PIXELS_HEADER.size)
    pixels.flags.writeable = False
    return pixels.reshape(height, width, 3)


def _decoded(data: bytes, *, max_pixels: int, resize: int | None) -> Image.Image:
    """Decode to RGB as ImageFolder does, shrunk so the short side is at most ``resize``."""
    with pixel_limit_lifted():
        image = open_image(data, max_pixels=max_pixels)
        size = target_size(*image.size, resize)
        try:
            if size != image.size and image.format == "JPEG":
                image.draft("RGB", size)  # decode at the smallest 1/2^k scale still >= size
            rgb = image.convert("RGB")
        except Exception as err:  # decoders raise OSError, SyntaxError, ValueError, ...
            raise unpackable(err) from None
    if rgb.size != size:
        rgb = rgb.resize(size, Image.Resampling.LANCZOS)
    return rgb


def _check_resize(resize: int | None) -> None:
    if resize is not None and (not isinstance(resize, int) or resize < 1):
        raise ValueError(f"resize must be a positive number of pixels, not {resize!r}")


def _planned(image_size: tuple[int, int] | None, resize: int | None, size: int,
             bytes_per_pixel: float | None) -> int:
    if image_size is None:
        return size
    width, height = target_size(*image_size, resize)
    if bytes_per_pixel is None:  # re-encoded: scale the source bytes by the pixels kept
        return max(1, size * width * height // max(1, image_size[0] * image_size[1]))
    return int(width * height * bytes_per_pixel) + _PIXELS_HEADER.size


@dataclass(frozen=True)
class JpegCodec:
    """Re-encode as JPEG at ``quality``, optionally with the short side shrunk to ``resize``."""

    name: ClassVar[str] = "jpeg"
    quality: int = 90
    resize: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.quality, int) or not 1 <= self.quality <= 100:
            raise ValueError(f"quality must be an integer from 1 to 100, not {self.quality!r}")
        _check_resize(self.resize)

    def encode(self, data: bytes, *, check: str, max_pixels: int) -> bytes:
        """Decode (always fully: re-encoding needs every pixel), shrink, encode as JPEG."""
        buffer = io.BytesIO()
        _decoded(data, max_pixels=max_pixels, resize=self.resize).save(
            buffer, "JPEG", quality=self.quality, subsampling="4:2:0")
        return buffer.getvalue()

    def decode(self, data: bytes) -> Image.Image:
        """The stored JPEG as an RGB image."""
        with pixel_limit_lifted(), Image.open(io.BytesIO(data)) as image:
            rgb: Image.Image = image.convert("RGB")
        return rgb

    def planned_bytes(self, image_size: tuple[int, int] | None, size: int) -> int:
        """Estimated stored bytes, from the source's dimensions and size."""
        return _planned(image_size, self.resize, size, None)

    def params(self) -> dict[str, Any]:
        """Recorded in the manifest."""
        return {"quality": self.quality, "resize": self.resize, "subsampling": "4:2:0",
                "exif_transpose": False}

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> JpegCodec:
        """The codec a manifest's ``codec_params`` describe."""
        return cls(quality=params.get("quality", 90), resize=params.get("resize"))


@dataclass(frozen=True)
class PixelsCodec:
    """Store decoded RGB pixels, optionally with the short side shrunk to ``resize``."""

    name: ClassVar[str] = "pixels"
    resize: int | None = None

    def __post_init__(self) -> None:
        _check_resize(self.resize)

    def encode(self, data: bytes, *, check: str, max_pixels: int) -> bytes:
        """Decode (always fully), shrink, store header + raw RGB rows."""
        rgb = _decoded(data, max_pixels=max_pixels, resize=self.resize)
        return _PIXELS_HEADER.pack(_PIXELS_MAGIC, *rgb.size) + rgb.tobytes()

    def decode(self, data: bytes) -> Image.Image:
        """The stored pixels as an RGB image: nothing to decode, nothing copied.

        The image shares ``data``'s memory (Pillow copies it before any in-place edit), so
        ``data`` must not change afterwards; the readers hand over immutable ``bytes``.

        Raises:
            ValueError: the payload is not a ``pixels`` record (damaged data).
        """
        pixels = pixels_array(data)
        if pixels is None:
            raise ValueError("not a packer pixels record: the shard is damaged (packer verify)")
        return Image.fromarray(pixels)

    def planned_bytes(self, image_size: tuple[int, int] | None, size: int) -> int:
        """Stored bytes, exactly, from the source's dimensions."""
        return _planned(image_size, self.resize, size, 3.0)

    def params(self) -> dict[str, Any]:
        """Recorded in the manifest."""
        return {"resize": self.resize, "layout": "PKPX<width:u32><height:u32> + RGB uint8 HWC",
                "exif_transpose": False}

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> PixelsCodec:
        """The codec a manifest's ``codec_params`` describe."""
        return cls(resize=params.get("resize"))
