"""The default codec, ``original``: the source file's bytes, untouched.

Decoded exactly as torchvision's ``pil_loader`` does (``Image.open(f).convert("RGB")``; EXIF
orientation is not applied, as in ImageFolder), so samples are byte- and pixel-exact.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from PIL import Image

from packer.format.codecs.base import Codec, ExportFormat
from packer.source.imagecheck import check_image, pixel_limit_lifted

__all__ = ["OriginalCodec"]


@dataclass(frozen=True)
class OriginalCodec(Codec):
    """Store the source file's bytes untouched; decode like torchvision's ``pil_loader``."""

    name: ClassVar[str] = "original"
    keeps_source_bytes: ClassVar[bool] = True

    def encode(self, data: bytes, *, check: str, max_pixels: int) -> bytes:
        """Check ``data`` at the ``check`` level and return it unchanged."""
        check_image(data, check=check, max_pixels=max_pixels)
        return data

    def decode(self, data: bytes) -> Image.Image:
        """``Image.open(...).convert("RGB")``, with no pixel limit (conversion vetted it)."""
        with pixel_limit_lifted(), Image.open(io.BytesIO(data)) as image:
            rgb: Image.Image = image.convert("RGB")
        return rgb

    def planned_bytes(self, image_size: tuple[int, int] | None, size: int) -> int:
        """The source bytes, stored as they are."""
        return size

    def params(self) -> dict[str, Any]:
        """The original codec has no parameters; the EXIF choice is recorded for clarity."""
        return {"exif_transpose": False}

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> OriginalCodec:
        """The codec a manifest's ``codec_params`` describe."""
        return cls()

    def export_format(self) -> ExportFormat:
        """The original bytes at their original paths."""
        return ExportFormat(None, (), "the original bytes at their original paths")
