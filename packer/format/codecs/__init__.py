"""How an image is stored in a shard, and how it comes back as an RGB image.

A codec turns a source file's bytes into stored bytes at conversion time and stored bytes into
a PIL image at read time. Codecs are registered by name; the name and :meth:`Codec.params` are
recorded in the manifest, so a dataset always knows how to decode itself. Any codec works with
any backend.

Built in: ``original``, the default, stores the source bytes untouched (byte-exact) and decodes
them exactly as torchvision's ``pil_loader`` does (``Image.open(f).convert("RGB")``; EXIF
orientation is not applied, as in ImageFolder). ``jpeg`` and ``pixels`` (packer.format.codecs.reencode)
decode at conversion time and may shrink images, so that reading costs less.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Protocol

from PIL import Image

from packer.errors import UnknownNameError
from packer.source.imagecheck import CHECK_LEVELS, DEFAULT_MAX_PIXELS, check_image, pixel_limit_lifted
from packer.format.codecs.reencode import JpegCodec, PixelsCodec

__all__ = [
    "CHECK_LEVELS",
    "DEFAULT_MAX_PIXELS",
    "Codec",
    "JpegCodec",
    "OriginalCodec",
    "PixelsCodec",
    "check_image",
    "codec_names",
    "get_codec",
]


class Codec(Protocol):
    """Encodes source bytes for storage and decodes stored bytes to an RGB image."""

    name: ClassVar[str]

    def encode(self, data: bytes, *, check: str, max_pixels: int) -> bytes:
        """Return the bytes to store for one source file.

        Raises:
            UnpackableFile: the bytes are not a readable image at the ``check`` level.
        """
        ...

    def decode(self, data: bytes) -> Image.Image:
        """Return the RGB image for stored bytes."""
        ...

    def params(self) -> dict[str, Any]:
        """Parameters to record in the manifest, enough to decode without guessing."""
        ...

    def planned_bytes(self, image_size: tuple[int, int] | None, size: int) -> int:
        """Estimated stored bytes for a source of ``size`` bytes and ``image_size`` pixels
        (None when unknown); shards are planned with it."""
        ...


@dataclass(frozen=True)
class OriginalCodec:
    """Store the source file's bytes untouched; decode like torchvision's ``pil_loader``."""

    name: ClassVar[str] = "original"

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


_CODECS: dict[str, Any] = {c.name: c for c in (OriginalCodec, JpegCodec, PixelsCodec)}
CODECS: Mapping[str, Any] = MappingProxyType(_CODECS)


def codec_names() -> tuple[str, ...]:
    """Sorted names of the registered codecs (the CLI's ``--codec`` choices)."""
    return tuple(sorted(_CODECS))


def get_codec(name: str, params: Mapping[str, Any] | None = None) -> Codec:
    """Build the codec registered as ``name`` from ``params`` (as recorded in a manifest, or
    the options of ``--codec``: ``quality``, ``resize``); missing ones take their defaults.

    Raises:
        UnknownNameError: no codec of that name (the message lists the choices), or parameters
            this packer cannot honour.
    """
    try:
        cls = _CODECS[name]
    except KeyError:
        raise UnknownNameError(f"Unknown codec {name!r}; available: {', '.join(codec_names())}. "
                               "A dataset written by a newer packer may need an upgrade "
                               "(pip install -U packer).") from None
    try:
        codec: Codec = cls.from_params(params or {})
    except (TypeError, ValueError) as err:
        raise UnknownNameError(f"Codec {name!r} cannot take {dict(params or {})}: {err}") from err
    unknown = set(params or {}) - set(codec.params())
    if unknown:
        raise UnknownNameError(f"Codec {name!r} has no option {', '.join(sorted(unknown))}; it "
                               f"takes {', '.join(sorted(codec.params()))}.")
    return codec
