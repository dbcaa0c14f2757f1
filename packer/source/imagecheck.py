"""Prove a source file is an image Pillow reads, and name the reason when it is not.

What each ``--check`` level catches (measured: ``tests/test_check_levels.py`` runs every kind
at every level against the full decode this check used to be):

========== ======================================================================================
``full``   all that ``header`` catches, plus data that ends early (``truncated``: a JPEG cut
           anywhere in its scans, even just its EOI marker; PNG, BMP, TIFF, PPM cut) and data
           the decoder rejects (``decode_error``: a flipped byte in a PNG's IDAT, a second SOI
           or an SOF marker inside a JPEG's scan data)
``header`` not an image (``not_an_image``: HTML, junk, zero bytes); a header that ends early
           (``truncated``); over ``max_pixels`` (``decompression_bomb``); a header Pillow
           rejects (``decode_error``, e.g. a WebP cut inside its header)
``none``   nothing: every readable file is packed
========== ======================================================================================

At every level, files that cannot be read at all are named before any check
(:func:`packer.source.sourcefile.read_source`: ``empty_file``, ``broken_symlink``,
``permission_denied``, ``not_a_regular_file``). No level catches damage that leaves a JPEG's
scan data well formed (flipped bits that make no marker, an unknown marker): libjpeg only warns
and decodes wrong pixels, as readers will; the full decode packed those files too.

``full`` decodes a JPEG at 1/8 scale and in grayscale (Pillow's ``draft``). libjpeg still
Huffman-decodes every coefficient of every component, so it meets the same markers, errors and
end of data as a full decode, and names the same files with the same reasons; it skips the
inverse DCT, upsampling and colour conversion. On 3,000 photo-like ImageNet-sized JPEGs (81 KB,
~440x380) that takes 1.14 ms per image per core instead of 1.75 ms (1.54x); what is left is
Huffman decoding itself (about half of a full decode's time), the floor for any check that
catches what a full decode catches. ``header`` takes 0.05 ms. Other formats are decoded in full.

Pillow's decompression-bomb limit and truncated-image setting are process-wide; packer lifts
the first (it applies its own ``max_pixels``) and pins the second off only while it opens
images, restoring the user's settings afterwards.
"""

from __future__ import annotations

import io
import logging
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

from PIL import Image, ImageFile, UnidentifiedImageError
from PIL.JpegImagePlugin import JpegImageFile

from packer.source.sourcefile import UnpackableFile

__all__ = ["CHECK_LEVELS", "DEFAULT_MAX_PIXELS", "UndecodableImage", "check_image", "decoder_failures",
           "image_dimensions", "open_image",
           "pixel_limit_lifted", "unpackable"]

log = logging.getLogger(__name__)

#: Pillow's own decompression-bomb limit, the default for ``max_pixels``.
DEFAULT_MAX_PIXELS: Final[int] = int(Image.MAX_IMAGE_PIXELS or 89_478_485)

#: How much of each source image conversion proves readable: every pixel, the header, nothing.
CHECK_LEVELS: Final[tuple[str, ...]] = ("full", "header", "none")

_TRUNCATED_MESSAGES = ("truncated", "Truncated File Read", "image file is truncated")


_LIFT_LOCK = threading.Lock()
_lifted = 0
_saved_settings: tuple[int | None, bool] = (None, False)


@contextmanager
def pixel_limit_lifted() -> Iterator[None]:
    """Let Pillow open any size; callers apply their own limit. Also refuse truncated data.

    Pillow's settings are process-wide, so overlapping uses (threads decoding at once) are
    counted: the first saves the user's settings, the last restores them. Saving and restoring
    per use would let two overlapping uses leave the limit lifted for good.
    """
    global _lifted, _saved_settings
    with _LIFT_LOCK:
        if _lifted == 0:
            _saved_settings = (Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES)
            Image.MAX_IMAGE_PIXELS = None
            ImageFile.LOAD_TRUNCATED_IMAGES = False
        _lifted += 1
    try:
        yield
    finally:
        with _LIFT_LOCK:
            _lifted -= 1
            if _lifted == 0:
                Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES = _saved_settings


class UndecodableImage(ValueError):
    """What a decoder raised, whatever its type; ``str()`` is ``"<type>: <message>"``."""

    def __init__(self, err: Exception) -> None:
        super().__init__(f"{type(err).__name__}: {err}")
        self.cause = err


@contextmanager
def decoder_failures(as_error: Callable[[Exception], Exception] = UndecodableImage) -> Iterator[None]:
    """Run a decode; whatever the decoder raises becomes ``as_error(err)``.

    Pillow's decoders raise OSError, SyntaxError, ValueError, struct.error and more for damaged
    data, so this is packer's one ``except Exception`` around decoding: callers catch
    :class:`UndecodableImage` (or the error they asked for) instead.
    """
    try:
        yield
    except UnpackableFile:
        raise
    except Exception as err:  # the one place that catches what any decoder may raise
        raise as_error(err) from err


def unpackable(err: Exception) -> UnpackableFile:
    """Name the reason a Pillow error means, keeping Pillow's message as the detail."""
    if isinstance(err, UnidentifiedImageError):
        return UnpackableFile("not_an_image", "not an image format Pillow can identify")
    detail = f"{type(err).__name__}: {err}"
    if isinstance(err, OSError) and any(m in str(err) for m in _TRUNCATED_MESSAGES):
        return UnpackableFile("truncated", detail)
    return UnpackableFile("decode_error", detail)


def image_dimensions(source: str | bytes) -> tuple[int, int] | None:
    """Width and height from the header of the file at ``source`` or of the encoded bytes
    ``source`` (nothing decoded), or None if unreadable."""
    opened = io.BytesIO(source) if isinstance(source, bytes) else source
    try:
        with pixel_limit_lifted(), warnings.catch_warnings(), decoder_failures():
            warnings.simplefilter("ignore")
            with Image.open(opened) as image:
                width, height = image.size
                return int(width), int(height)
    except UndecodableImage:  # any unreadable file: conversion reports it properly later
        return None


def open_image(data: bytes, *, max_pixels: int) -> Image.Image:
    """Open ``data`` (header only) and refuse more than ``max_pixels``; call under
    :func:`pixel_limit_lifted`.

    Raises:
        UnpackableFile: ``not_an_image``, ``decompression_bomb``, ``truncated`` or ``decode_error``.
    """
    with decoder_failures(unpackable):
        image = Image.open(io.BytesIO(data))
    width, height = image.size
    if width * height > max_pixels:
        raise UnpackableFile("decompression_bomb", f"{width}x{height} = {width * height} pixels is "
                             f"over the limit of {max_pixels} (raise max_pixels to pack it)")
    return image


def check_image(data: bytes, *, check: str, max_pixels: int) -> None:
    """Prove ``data`` is an image Pillow reads, to the depth ``check`` asks for.

    Raises:
        UnpackableFile: ``not_an_image``, ``decompression_bomb``, ``truncated`` or ``decode_error``.
        ValueError: ``check`` is not one of :data:`CHECK_LEVELS`.
    """
    if check not in CHECK_LEVELS:
        raise ValueError(f"check must be one of {', '.join(CHECK_LEVELS)}, not {check!r}")
    if check == "none":
        return
    with pixel_limit_lifted(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        image = open_image(data, max_pixels=max_pixels)
        if check == "full":
            with decoder_failures(unpackable):
                _decode_all(image)
    for warning in caught:
        log.debug("Pillow warned while checking an image: %s", warning.message)


def _decode_all(image: Image.Image) -> None:
    """Run the decoder over all of ``image``'s data, and prove the RGB conversion works.

    A JPEG is decoded at 1/8 scale, in grayscale when it is colour (see the module docstring):
    libjpeg must Huffman-decode every coefficient to find the next, so it reads exactly what a
    full decode reads. Other formats have no reduced mode and are decoded in full.
    """
    mode = image.mode
    if isinstance(image, JpegImageFile):
        image.draft("L", (1, 1))  # "L" only applies to RGB; (1, 1) asks for the smallest scale
    image.load()
    if mode != "RGB":  # prove the RGB conversion readers do works too
        image.convert("RGB")
