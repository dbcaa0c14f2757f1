"""The ``pixels`` codec: decoded ``uint8`` RGB rows, nothing to decode at read time.

A record is a 12-byte header (``b"PKPX"``, width, height as little-endian uint32) and the
rows (HWC), optionally shrunk at conversion (see :mod:`.reencode`); it costs space.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import numpy as np
from PIL import Image

from packer.format.codecs.base import Codec, ExportFormat, StoredImage
from packer.format.codecs.reencode import PIXELS_HEADER, check_resize, decoded_rgb, planned_size

__all__ = ["PIXELS_MAGIC", "PixelsCodec", "pixels_array"]

PIXELS_MAGIC: Final = b"PKPX"


def pixels_array(data: bytes | bytearray | memoryview) -> np.ndarray | None:
    """A read-only ``uint8`` ``(height, width, 3)`` view of a ``pixels`` record, no copy;
    ``None`` when ``data`` is not one (an encoded image: no format starts with ``PKPX`` and
    has exactly the record's length)."""
    if len(data) < PIXELS_HEADER.size:
        return None
    magic, width, height = PIXELS_HEADER.unpack_from(data)
    if magic != PIXELS_MAGIC or len(data) != PIXELS_HEADER.size + width * height * 3:
        return None
    pixels = np.frombuffer(data, dtype=np.uint8, offset=PIXELS_HEADER.size)
    pixels.flags.writeable = False
    return pixels.reshape(height, width, 3)


@dataclass(frozen=True)
class PixelsCodec(Codec):
    """Store decoded RGB pixels, optionally with the short side shrunk to ``resize``."""

    name: ClassVar[str] = "pixels"
    takes: ClassVar[tuple[str, ...]] = ("resize",)
    resize: int | None = None

    def __post_init__(self) -> None:
        check_resize(self.resize)

    def encode(self, data: bytes, *, check: str, max_pixels: int) -> bytes:
        """Decode (always fully), shrink, store header + raw RGB rows."""
        rgb = decoded_rgb(data, max_pixels=max_pixels, resize=self.resize)
        return PIXELS_HEADER.pack(PIXELS_MAGIC, *rgb.size) + rgb.tobytes()

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
        return planned_size(image_size, self.resize, size, 3.0)

    def params(self) -> dict[str, Any]:
        """Recorded in the manifest."""
        return {"resize": self.resize, "layout": "PKPX<width:u32><height:u32> + RGB uint8 HWC",
                "exif_transpose": False}

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> PixelsCodec:
        """The codec a manifest's ``codec_params`` describe."""
        return cls(resize=params.get("resize"))

    def export_format(self) -> ExportFormat:
        """The pixels as lossless PNG files."""
        return ExportFormat(".png", (".png",), "the pixels as lossless PNG, named .png")

    def exported_bytes(self, stored: bytes) -> bytes:
        """A lossless PNG of the stored pixels."""
        buffer = io.BytesIO()
        self.decode(stored).save(buffer, "PNG")
        return buffer.getvalue()

    def describe(self, stored: bytes) -> StoredImage:
        """Size from the record's header; always RGB."""
        pixels = pixels_array(stored)
        if pixels is None:
            return super().describe(stored)
        return StoredImage(pixels.shape[1], pixels.shape[0], "RGB", "pixels")
