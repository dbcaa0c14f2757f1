"""Image fields: ``image`` (stored by a codec) and ``mask`` (class indices per pixel, lossless).

An image field gives the fields after it its size, ``context["<name>.size"] == (width, height)``
of the stored image, read from the stored bytes' header. A mask is checked against it: same size.

A mask record is either a PNG (``encoding="png"``: mode ``L`` for ``uint8``, ``I;16`` for
``uint16``) or ``raw``: a 16-byte header ``b"PKMK" <itemsize:u8> <3 zero bytes> <height:u32>
<width:u32>`` (little-endian) then the rows, ``uint8`` or little-endian ``uint16``.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping
from typing import Any, ClassVar, Final

import numpy as np
from PIL import Image

from packer.errors import UnknownNameError
from packer.format.codecs import CHECK_LEVELS, DEFAULT_MAX_PIXELS, Codec, codec_names, get_codec
from packer.format.fields.base import FieldType, FieldValueError
from packer.format.fields.types.values import (
    INVALID_VALUE,
    choice,
    class_names,
    field_name,
    known,
    positive_int,
)
from packer.source.imagecheck import decoder_failures, pixel_limit_lifted, unpackable
from packer.source.sourcefile import UnpackableFile

__all__ = ["ImageType", "MaskType", "image_size"]

#: A mask whose size is not its image's.
MASK_SIZE: Final = "mask_size"
#: A mask value that is no class (nor the ``ignore`` value), or past the mask's dtype.
MASK_VALUE: Final = "mask_value"
_RAW_HEADER: Final = struct.Struct("<4sB3xII")
_RAW_MAGIC: Final = b"PKMK"
#: Deflate expands at most ~1032x; a PNG claiming more pixel bytes than this per stored byte is damaged.
_MAX_DEFLATE_RATIO: Final = 1100
#: Pillow modes a mask may come in, each holding one class index per pixel.
_MASK_MODES: Final = ("1", "L", "P", "I;16", "I;16L", "I;16B", "I")


def image_size(context: Mapping[str, Any], image: str) -> tuple[int, int]:
    """The ``(width, height)`` the image field ``image`` gave ``context``.

    Raises:
        FieldValueError: ``not_an_image``: the image has no readable size (stored unchecked).
    """
    size = context.get(f"{image}.size")
    if size is None:
        raise FieldValueError("not_an_image", f"the image field {image!r} has no readable size to "
                                              "check against")
    return int(size[0]), int(size[1])


def _damaged(err: Exception) -> ValueError:
    return ValueError(f"not a readable stored image ({type(err).__name__}: {err})")


class ImageType(FieldType):
    """An image file's bytes, stored by a codec (``original`` by default: untouched); read back as
    an RGB PIL image. ``check`` and ``max_pixels`` are the conversion's checks of each image."""

    name: ClassVar[str] = "image"

    def __init__(self, codec: Codec | None = None) -> None:
        # Bound to a codec object: a conversion's (pickled by reference to its class, so a codec
        # registered only in the parent still reaches spawned workers); else looked up by name.
        self._codec = codec

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        known(params, ("codec", "codec_params", "check", "max_pixels"))
        codec = choice(params, "codec", codec_names(), "original")
        given = params.get("codec_params") or {}
        if not isinstance(given, Mapping):
            raise ValueError(f"param 'codec_params' must be a mapping, not {given!r}")
        try:
            recorded = get_codec(codec, given).params()
        except UnknownNameError as err:
            raise ValueError(f"param 'codec_params': {err}") from None
        return {"codec": codec, "codec_params": recorded,
                "check": choice(params, "check", CHECK_LEVELS, "full"),
                "max_pixels": positive_int(params, "max_pixels", DEFAULT_MAX_PIXELS)}

    def encode(self, value: Any, params: Mapping[str, Any], *, context: Mapping[str, Any]) -> bytes:
        """An image file's bytes go to the codec as they are; a PIL image or an ``[H, W]`` /
        ``[H, W, 3|4]`` ``uint8`` array is first saved as PNG (lossless), which the codec then
        keeps (``original``) or re-encodes."""
        if isinstance(value, Image.Image | np.ndarray):
            value = _png_of(value)
        if not isinstance(value, bytes | bytearray | memoryview):
            raise FieldValueError(INVALID_VALUE, f"an image field takes an image file's bytes, a PIL "
                                                 f"image or a uint8 array, not {type(value).__name__}")
        try:
            return self.codec(params).encode(bytes(value), check=params["check"],
                                             max_pixels=params["max_pixels"])
        except UnpackableFile as err:
            raise FieldValueError(err.reason, err.detail) from None

    def decode(self, payload: bytes | memoryview, params: Mapping[str, Any]) -> Image.Image:
        with decoder_failures(_damaged):
            return self.codec(params).decode(bytes(payload))

    def context_of(self, name: str, value: Any, payload: bytes, params: Mapping[str, Any]) -> dict[str, Any]:
        """The stored image's ``(width, height)``; nothing when its header does not read."""
        try:
            with decoder_failures(_damaged):
                stored = self.codec(params).describe(bytes(payload))
        except ValueError:  # stored unchecked (check="none"): no mask or boxes can fit it
            return {}
        return {f"{name}.size": (stored.width, stored.height)}

    def codec(self, params: Mapping[str, Any]) -> Codec:
        """The bound codec, or the one the (checked) params name."""
        return self._codec if self._codec is not None else get_codec(params["codec"], params["codec_params"])


def _png_of(image: Image.Image | np.ndarray) -> bytes:
    """A PIL image or a ``uint8`` array (gray ``[H, W]``, RGB or RGBA ``[H, W, C]``) as PNG bytes."""
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or not (image.ndim == 2 or (image.ndim == 3 and image.shape[2] in (3, 4))):
            raise FieldValueError(INVALID_VALUE, f"an image array must be uint8 [H, W] or [H, W, 3|4], "
                                                 f"not {list(image.shape)} {image.dtype}")
        image = Image.fromarray(image)
    buffer = io.BytesIO()
    try:
        image.save(buffer, "PNG", compress_level=1)
    except (OSError, ValueError) as err:  # a mode PNG cannot hold
        raise FieldValueError(INVALID_VALUE, f"a {image.mode} image cannot be saved as PNG ({err}): "
                                             "convert it to RGB first") from None
    return buffer.getvalue()


class MaskType(FieldType):
    """Class indices per pixel of the ``image`` field, ``uint8`` or ``uint16``, stored losslessly.

    Value: a 2-D integer array (H, W), a PIL image of mode L, P (a palette PNG's indices are the
    values), I;16 or 1, or PNG bytes. With ``classes``, each value is a class index or ``ignore``
    (default: the dtype's largest value, 255 for uint8).
    """

    name: ClassVar[str] = "mask"
    refers_to: ClassVar[Mapping[str, str]] = {"image": "image"}

    def in_image_pixels(self, params: Mapping[str, Any]) -> bool:
        return True

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        known(params, ("image", "encoding", "dtype", "classes", "ignore"))
        dtype = choice(params, "dtype", ("uint8", "uint16"), "uint8")
        top = int(np.iinfo(dtype).max)
        classes = class_names(params)
        if len(classes) > top + 1:
            raise ValueError(f"param 'classes': {len(classes)} classes do not fit in {dtype}")
        ignore = params.get("ignore", top)
        if ignore is not None and (isinstance(ignore, bool) or not isinstance(ignore, int)
                                   or not 0 <= ignore <= top):
            raise ValueError(f"param 'ignore' must be null or an integer from 0 to {top}, not {ignore!r}")
        return {"image": field_name(params, "image"),
                "encoding": choice(params, "encoding", ("png", "raw"), "png"),
                "dtype": dtype, "classes": classes, "ignore": ignore}

    def encode(self, value: Any, params: Mapping[str, Any], *, context: Mapping[str, Any]) -> bytes:
        width, height = image_size(context, params["image"])
        mask = _mask_array(value, (width, height))
        if mask.shape != (height, width):
            raise FieldValueError(MASK_SIZE, f"mask of {mask.shape[1]}x{mask.shape[0]} for an image of "
                                             f"{width}x{height}")
        mask = _checked_values(mask, params)
        if params["encoding"] == "raw":
            return _RAW_HEADER.pack(_RAW_MAGIC, mask.itemsize, height, width) + mask.astype(
                mask.dtype.newbyteorder("<")).tobytes()
        buffer = io.BytesIO()
        Image.fromarray(mask).save(buffer, "PNG", compress_level=6)
        return buffer.getvalue()

    def decode(self, payload: bytes | memoryview, params: Mapping[str, Any]) -> np.ndarray:
        dtype = np.dtype(params["dtype"])
        if params["encoding"] == "raw":
            return _raw_mask(payload, dtype)
        return _png_mask(bytes(payload), dtype)


def _mask_array(value: Any, size: tuple[int, int]) -> np.ndarray:
    """``value`` as a 2-D integer array (any integer dtype); an image (PNG bytes are opened) has
    its size compared with ``size`` before it is decoded, so a huge one costs nothing."""
    if isinstance(value, bytes | bytearray | memoryview):
        value = _opened_png(bytes(value), size)
    if isinstance(value, Image.Image):
        if value.size != size:  # before decoding
            raise FieldValueError(MASK_SIZE, f"mask of {value.width}x{value.height} for an image of "
                                             f"{size[0]}x{size[1]}")
        if value.mode not in _MASK_MODES:
            raise FieldValueError(INVALID_VALUE, f"a mask image holds one class index per pixel (mode "
                                                 f"{', '.join(_MASK_MODES)}), not mode {value.mode}")
        try:
            with pixel_limit_lifted(), decoder_failures(unpackable):
                value = np.asarray(value)
        except UnpackableFile as err:
            raise FieldValueError(err.reason, err.detail) from None
    if not isinstance(value, np.ndarray):
        raise FieldValueError(INVALID_VALUE, f"a mask is a 2-D array, a PIL image or PNG bytes, not "
                                             f"{type(value).__name__}")
    if value.ndim != 2 or value.dtype.kind not in "biu":
        raise FieldValueError(INVALID_VALUE, f"a mask is a 2-D integer array, not "
                                             f"{value.ndim}-D {value.dtype}")
    return value


def _opened_png(data: bytes, size: tuple[int, int]) -> Image.Image:
    try:
        with pixel_limit_lifted(), decoder_failures(unpackable):
            image = Image.open(io.BytesIO(data))
    except UnpackableFile as err:
        raise FieldValueError(err.reason, err.detail) from None
    if image.format != "PNG":
        raise FieldValueError(INVALID_VALUE, f"mask bytes must be a PNG, not {image.format}")
    return image


def _checked_values(mask: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
    """``mask`` as the field's dtype, each value in range (a class or ``ignore`` with classes)."""
    dtype = np.dtype(params["dtype"])
    if mask.size:
        low, high = int(mask.min()), int(mask.max())
        if low < 0 or high > np.iinfo(dtype).max:
            raise FieldValueError(MASK_VALUE, f"mask values {low}..{high} do not fit {dtype.name}")
    classes, ignore = params["classes"], params["ignore"]
    if classes:
        bad = mask >= len(classes)
        if ignore is not None:
            bad &= mask != ignore
        if bad.any():
            values = np.unique(mask[bad])
            raise FieldValueError(MASK_VALUE, f"mask values {values[:5].tolist()} are no class of "
                                              f"{len(classes)} (ignore value {ignore})")
    return np.ascontiguousarray(mask, dtype=dtype)


def _raw_mask(payload: bytes | memoryview, dtype: np.dtype) -> np.ndarray:
    if len(payload) < _RAW_HEADER.size:
        raise ValueError("raw mask record shorter than its header")
    magic, itemsize, height, width = _RAW_HEADER.unpack_from(payload)
    if magic != _RAW_MAGIC or itemsize != dtype.itemsize:
        raise ValueError(f"not a raw {dtype.name} mask record")
    if len(payload) != _RAW_HEADER.size + height * width * itemsize:
        raise ValueError(f"raw mask record of {len(payload)} bytes does not hold {width}x{height} "
                         f"{dtype.name}")
    rows = np.frombuffer(payload, dtype=dtype.newbyteorder("<"), offset=_RAW_HEADER.size)
    return rows.reshape(height, width).astype(dtype)


def _png_mask(data: bytes, dtype: np.dtype) -> np.ndarray:
    modes = ("L",) if dtype == np.uint8 else ("I;16", "I;16B", "I;16L", "I")
    with pixel_limit_lifted(), decoder_failures(_damaged):
        with Image.open(io.BytesIO(data)) as image:
            if image.format != "PNG" or image.mode not in modes:
                raise ValueError(f"not a {dtype.name} PNG mask record ({image.format}, mode {image.mode})")
            if image.height * (image.width * dtype.itemsize + 1) > _MAX_DEFLATE_RATIO * len(data):
                raise ValueError(f"PNG mask record of {len(data)} bytes claims {image.width}x{image.height}")
            pixels = np.asarray(image)
    if pixels.shape != (image.height, image.width) or pixels.min(initial=0) < 0 \
            or pixels.max(initial=0) > np.iinfo(dtype).max:
        raise ValueError(f"PNG mask record's pixels do not fit {dtype.name}")
    return pixels.astype(dtype)
