"""What a codec is: how one image is stored in a shard, and what callers may ask of it.

A codec turns a source file's bytes into stored bytes at conversion time and stored bytes into
a PIL image at read time. Callers never compare codec names: they ask the codec
(:attr:`Codec.keeps_source_bytes`, :attr:`Codec.takes`, :meth:`Codec.export_format`,
:meth:`Codec.describe`). Its name and :meth:`Codec.params` are recorded in the manifest, so a
dataset always knows how to decode itself. Any codec works with any backend.
"""

from __future__ import annotations

import io
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from PIL import Image

from packer.source.imagecheck import pixel_limit_lifted

__all__ = ["Codec", "ExportFormat", "StoredImage"]


@dataclass(frozen=True)
class ExportFormat:
    """How ``packer export`` writes a codec's samples back as image files.

    ``suffix`` None: the stored bytes under the recorded path, untouched. Otherwise files are
    named with ``suffix`` unless their name already ends in one of ``keeps`` (lower case).
    """

    suffix: str | None
    keeps: tuple[str, ...]
    description: str


@dataclass(frozen=True)
class StoredImage:
    """What a stored sample is, read from its header (nothing decoded)."""

    width: int
    height: int
    mode: str
    format: str


class Codec(ABC):
    """Encodes source bytes for storage and decodes stored bytes to an RGB image.

    Subclasses are frozen dataclasses of their options, registered by name with
    :func:`~packer.format.codecs.register_codec`.
    """

    #: The name recorded in manifests and given to ``--codec``.
    name: ClassVar[str]
    #: Stored bytes are the source file's bytes, untouched (byte-exact; nothing to decode
    #: when converting unchecked; ``verify --against`` compares bytes).
    keeps_source_bytes: ClassVar[bool] = False
    #: The user options the codec takes (``--quality``, ``--resize``), by keyword.
    takes: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def encode(self, data: bytes, *, check: str, max_pixels: int) -> bytes:
        """Return the bytes to store for one source file.

        Raises:
            UnpackableFile: the bytes are not a readable image at the ``check`` level.
        """

    @abstractmethod
    def decode(self, data: bytes) -> Image.Image:
        """Return the RGB image for stored bytes."""

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Parameters to record in the manifest, enough to decode without guessing."""

    @abstractmethod
    def planned_bytes(self, image_size: tuple[int, int] | None, size: int) -> int:
        """Estimated stored bytes for a source of ``size`` bytes and ``image_size`` pixels
        (None when unknown); shards are planned with it."""

    @classmethod
    @abstractmethod
    def from_params(cls, params: Mapping[str, Any]) -> Codec:
        """The codec a manifest's ``codec_params`` (or the user's options) describe."""

    @abstractmethod
    def export_format(self) -> ExportFormat:
        """How exported files are named and what they hold."""

    def exported_bytes(self, stored: bytes) -> bytes:
        """The bytes of an exported image file for stored bytes (default: as stored)."""
        return stored

    def describe(self, stored: bytes) -> StoredImage:
        """Size, mode and format of a stored image, from its header (default: Pillow's)."""
        with pixel_limit_lifted(), Image.open(io.BytesIO(stored)) as image:
            return StoredImage(image.width, image.height, image.mode, image.format or "unknown")
