"""Stored bytes to RGB pixels, as ``Image.open(f).convert("RGB")`` gives them, by the fastest means at hand.

A :class:`Picture` knows its size from the header before anything is decoded, so a transform
can draw its crop first, then ask for the pixels at the smallest DCT scale the crop allows
(libjpeg decodes at 1/2, 1/4 or 1/8 of the size for a fraction of the work, and the smaller
picture is already low-passed). Three kinds:

* a ``pixels`` record (``--codec pixels``): a read-only view of the stored rows, no decode;
* a JPEG in YCbCr or grey: simplejpeg when the decoder is ``"simplejpeg"``, else Pillow; both
  are libjpeg-turbo with the same settings and give identical pixels at every scale;
* anything else (PNG, CMYK JPEGs, a file simplejpeg refuses) and PIL images (``decode=True``):
  Pillow, converted as ``convert("RGB")`` does. EXIF orientation is not applied, as in ImageFolder.

Encoded bytes must be one of packer's payloads; conversion vetted each against its own pixel
limit, so Pillow's ``MAX_IMAGE_PIXELS`` is lifted here, as ``decode=True`` trusts it too.
"""

from __future__ import annotations

import io
from abc import ABC, abstractmethod
from typing import Final, TypeAlias

import numpy as np
from PIL import Image

from packer.format.codecs import pixels_array
from packer.read import speedups
from packer.source.imagecheck import pixel_limit_lifted

__all__ = ["DECODERS", "Picture", "Sample", "open_picture", "resolve_decoder"]

#: What a transform takes: a PIL image (``decode=True``) or encoded bytes (``decode=False``).
Sample: TypeAlias = Image.Image | bytes | bytearray | memoryview

#: JPEG decoders: simplejpeg (the ``fast`` extra; about 1.5x Pillow's speed) or Pillow.
DECODERS: Final[tuple[str, ...]] = ("simplejpeg", "pil")

#: DCT scales libjpeg decodes to quickly, largest reduction first.
REDUCTIONS: Final = (8, 4, 2)

_SIMPLEJPEG_COLOURS: Final = frozenset({"YCbCr", "Gray"})  # CMYK/YCCK: Pillow converts its own way
_JPEG_MAGIC: Final = b"\xff\xd8"


def resolve_decoder(decoder: str) -> str:
    """``"auto"`` becomes simplejpeg when installed, else ``"pil"``; a named one is checked.

    Raises:
        ValueError: an unknown name.
        MissingExtraError: ``"simplejpeg"`` is asked for and not installed.
    """
    return speedups.resolve_choice("decoder", decoder, DECODERS, fast="simplejpeg", module="simplejpeg",
                                   fallback="pil")


class Picture(ABC):
    """One image's size, and its RGB pixels on demand (see the module doc).

    Attributes:
        width, height: The full image's size, as PIL's ``size``.
        reducible: Whether :meth:`pixels` can decode at a reduced DCT scale.
    """

    width: int
    height: int
    reducible: bool = False

    @abstractmethod
    def pixels(self, reduce: int = 1) -> tuple[np.ndarray, int]:
        """``HWC`` ``uint8`` RGB pixels (maybe a read-only view) and the reduction applied:
        ``reduce`` (1, 2, 4 or 8) when :attr:`reducible`, else 1. A reduced picture is
        ``ceil(width / reduce)`` wide; its pixel ``x`` covers source pixels ``[x*r, (x+1)*r)``."""

    def pil(self, reduce: int = 1) -> tuple[Image.Image, int]:
        """The pixels as a PIL image (RGB, or L for grey sources), for Pillow's resampler."""
        array, applied = self.pixels(reduce)
        return Image.fromarray(array, "RGB"), applied

    def close(self) -> None:  # noqa: B027 - only pictures holding a decoder need it
        """Release what the picture holds (an open PIL image)."""


class _RecordPicture(Picture):
    """A ``pixels`` record: its rows, read in place."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array
        self.height, self.width = array.shape[:2]

    def pixels(self, reduce: int = 1) -> tuple[np.ndarray, int]:
        return self._array, 1


class _SimpleJpegPicture(Picture):
    """A YCbCr or grey JPEG decoded by simplejpeg (libjpeg-turbo's TurboJPEG API)."""

    reducible = True

    def __init__(self, data: bytes | bytearray | memoryview, height: int, width: int) -> None:
        self._data = data
        self.height, self.width = height, width

    def pixels(self, reduce: int = 1) -> tuple[np.ndarray, int]:
        module = speedups.require("simplejpeg", "decoder='simplejpeg'")
        try:
            if reduce == 1:
                return module.decode_jpeg(self._data, colorspace="RGB"), 1
            # The smallest output at least this size is exactly the 1/reduce scale.
            return module.decode_jpeg(self._data, colorspace="RGB", min_height=-(-self.height // reduce),
                                      min_width=-(-self.width // reduce)), reduce
        except ValueError:  # a damaged stream: Pillow decides, with its own error or its pixels
            with pixel_limit_lifted(), Image.open(io.BytesIO(self._data)) as image:
                return _PilPicture(image, from_bytes=True).pixels(reduce)


class _PilPicture(Picture):
    """Anything Pillow opens; JPEGs from bytes draft to a reduced scale."""

    def __init__(self, image: Image.Image, *, from_bytes: bool) -> None:
        self._image = image
        self._from_bytes = from_bytes
        self.width, self.height = image.size
        self.reducible = from_bytes and image.format == "JPEG"

    def pil(self, reduce: int = 1) -> tuple[Image.Image, int]:
        image, applied = self._image, 1
        if reduce > 1 and self.reducible:
            drafted = image.draft("RGB", (self.width // reduce, self.height // reduce))
            if drafted is not None:
                applied = reduce
        if self._from_bytes:
            with pixel_limit_lifted():  # the same rules as opening it (truncated data refused)
                image.load()
        if image.mode not in ("RGB", "L"):  # resizing P, RGBA, CMYK, I;16... differs from converting first
            image = image.convert("RGB")
        return image, applied

    def pixels(self, reduce: int = 1) -> tuple[np.ndarray, int]:
        image, applied = self.pil(reduce)
        if image.mode != "RGB":
            image = image.convert("RGB")
        return np.asarray(image), applied

    def close(self) -> None:
        if self._from_bytes:  # a caller's PIL image (decode=True) stays open
            self._image.close()


def _simplejpeg_header(data: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """``(height, width)`` when simplejpeg should decode ``data``; None to leave it to Pillow."""
    module = speedups.simplejpeg()
    if module is None or bytes(data[:2]) != _JPEG_MAGIC:
        return None
    try:
        height, width, colour, _ = module.decode_jpeg_header(data)
    except ValueError:  # not a JPEG it can read: Pillow decides, with its own error if any
        return None
    return (height, width) if colour in _SIMPLEJPEG_COLOURS else None


def open_picture(sample: Sample, decoder: str = "pil") -> Picture:
    """The :class:`Picture` of ``sample`` (nothing decoded yet), with ``decoder`` for JPEGs
    (a name :func:`resolve_decoder` returned). Close it when done.

    Raises:
        TypeError: ``sample`` is neither a PIL image nor bytes.
        OSError: the bytes are no image Pillow can open (its own error).
    """
    if isinstance(sample, Image.Image):
        return _PilPicture(sample, from_bytes=False)
    if not isinstance(sample, bytes | bytearray | memoryview):
        raise TypeError(f"expected a PIL image or encoded bytes, not {type(sample).__name__}")
    if (record := pixels_array(sample)) is not None:
        return _RecordPicture(record)
    if decoder == "simplejpeg" and (header := _simplejpeg_header(sample)) is not None:
        return _SimpleJpegPicture(sample, *header)
    with pixel_limit_lifted():
        return _PilPicture(Image.open(io.BytesIO(sample)), from_bytes=True)
