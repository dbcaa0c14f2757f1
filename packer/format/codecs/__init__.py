"""How an image is stored in a shard, and how it comes back as an RGB image.

:mod:`~packer.format.codecs.base` says what a codec is and what callers may ask of it;
:mod:`~packer.format.codecs.registry` maps names to codecs. Built in:
``original`` (:mod:`~packer.format.codecs.original`, the default) stores the source bytes
untouched; ``jpeg`` and ``pixels`` (:mod:`~packer.format.codecs.jpeg`,
:mod:`~packer.format.codecs.pixels`) decode at conversion time and may shrink images, so that
reading costs less (:mod:`~packer.format.codecs.reencode`).
"""

from __future__ import annotations

from packer.format.codecs.base import Codec, ExportFormat, StoredImage
from packer.format.codecs.jpeg import JpegCodec
from packer.format.codecs.original import OriginalCodec
from packer.format.codecs.pixels import PixelsCodec, pixels_array
from packer.format.codecs.reencode import target_size
from packer.format.codecs.registry import codec_class, codec_names, get_codec, register_codec
from packer.source.imagecheck import CHECK_LEVELS, DEFAULT_MAX_PIXELS, check_image

__all__ = ["CHECK_LEVELS", "DEFAULT_MAX_PIXELS", "Codec", "ExportFormat", "JpegCodec", "OriginalCodec",
           "PixelsCodec", "StoredImage", "check_image", "codec_class", "codec_names", "get_codec",
           "pixels_array", "register_codec", "target_size"]
