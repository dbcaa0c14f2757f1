"""The ``jpeg`` codec: re-encoded as baseline JPEG, optionally shrunk (see :mod:`.reencode`).

Smaller and faster to decode than the originals when they are large; 4:2:0 chroma, as most
photos are.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from PIL import Image

from packer.format.codecs.base import Codec, ExportFormat
from packer.format.codecs.reencode import check_resize, decoded_rgb, planned_size
from packer.source.imagecheck import pixel_limit_lifted

__all__ = ["JpegCodec"]


@dataclass(frozen=True)
class JpegCodec(Codec):
    """Re-encode as JPEG at ``quality``, optionally with the short side shrunk to ``resize``."""

    name: ClassVar[str] = "jpeg"
    takes: ClassVar[tuple[str, ...]] = ("quality", "resize")
    quality: int = 90
    resize: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.quality, int) or not 1 <= self.quality <= 100:
            raise ValueError(f"quality must be an integer from 1 to 100, not {self.quality!r}")
        check_resize(self.resize)

    def encode(self, data: bytes, *, check: str, max_pixels: int) -> bytes:
        """Decode (always fully: re-encoding needs every pixel), shrink, encode as JPEG."""
        buffer = io.BytesIO()
        decoded_rgb(data, max_pixels=max_pixels, resize=self.resize).save(
            buffer, "JPEG", quality=self.quality, subsampling="4:2:0")
        return buffer.getvalue()

    def decode(self, data: bytes) -> Image.Image:
        """The stored JPEG as an RGB image."""
        with pixel_limit_lifted(), Image.open(io.BytesIO(data)) as image:
            rgb: Image.Image = image.convert("RGB")
        return rgb

    def planned_bytes(self, image_size: tuple[int, int] | None, size: int) -> int:
        """Estimated stored bytes, from the source's dimensions and size."""
        return planned_size(image_size, self.resize, size, None)

    def params(self) -> dict[str, Any]:
        """Recorded in the manifest."""
        return {"quality": self.quality, "resize": self.resize, "subsampling": "4:2:0",
                "exif_transpose": False}

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> JpegCodec:
        """The codec a manifest's ``codec_params`` describe."""
        return cls(quality=params.get("quality", 90), resize=params.get("resize"))

    def export_format(self) -> ExportFormat:
        """The stored JPEG bytes, named ``.jpg``."""
        return ExportFormat(".jpg", (".jpg", ".jpeg"), "the stored JPEG bytes, named .jpg")
