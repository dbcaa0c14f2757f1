"""How an image is stored in a shard, and how it comes back as an RGB image.

A codec turns a source file's bytes into stored bytes at conversion time and stored bytes into
a PIL image at read time. Codecs are registered by name; the name and :meth:`Codec.params` are
recorded in the manifest, so a dataset always knows how to decode itself. Any codec works with
any backend.

Built in: ``original``, the default, stores the source bytes untouched (byte-exact) and decodes
them exactly as torchvision's ``pil_loader`` does (``Image.open(f).convert("RGB")``; EXIF
orientation is not applied, as in ImageFolder).
"""

from __future__ import annotations

import io
import logging
import threading
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Final, Protocol

from PIL import Image, ImageFile, UnidentifiedImageError

from packer.errors import UnknownNameError
from packer.sourcefile import UnpackableFile

__all__ = [
    "CHECK_LEVELS",
    "DEFAULT_MAX_PIXELS",
    "Codec",
    "OriginalCodec",
    "codec_names",
    "get_codec",
]

log = logging.getLogger(__name__)

#: Pillow's own decompression-bomb limit, the default for ``max_pixels``.
DEFAULT_MAX_PIXELS: Final[int] = int(Image.MAX_IMAGE_PIXELS or 89_478_485)

#: How much of each source image conversion proves readable: every pixel, the header, nothing.
CHECK_LEVELS: Final[tuple[str, ...]] = ("full", "header", "none")

_TRUNCATED_MESSAGES = ("truncated", "Truncated File Read", "image file is truncated")


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


_LIFT_LOCK = threading.Lock()
_lifted = 0
_saved_settings: tuple[int | None, bool] = (None, False)


@contextmanager
def _pixel_limit_lifted() -> Iterator[None]:
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


def _unpackable(err: Exception) -> UnpackableFile:
    """Name the reason a Pillow error means, keeping Pillow's message as the detail."""
    if isinstance(err, UnidentifiedImageError):
        return UnpackableFile("not_an_image", "not an image format Pillow can identify")
    detail = f"{type(err).__name__}: {err}"
    if isinstance(err, OSError) and any(m in str(err) for m in _TRUNCATED_MESSAGES):
        return UnpackableFile("truncated", detail)
    return UnpackableFile("decode_error", detail)


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
    with _pixel_limit_lifted(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            image = Image.open(io.BytesIO(data))
        except Exception as err:  # Pillow raises many types for damaged headers
            raise _unpackable(err) from None
        width, height = image.size
        if width * height > max_pixels:
            raise UnpackableFile("decompression_bomb", f"{width}x{height} = {width * height} pixels is "
                                 f"over the limit of {max_pixels} (raise it with --max-pixels)")
        if check == "full":
            try:
                image.load()
                if image.mode != "RGB":  # prove the RGB conversion readers do works too
                    image.convert("RGB")
            except Exception as err:  # decoders raise OSError, SyntaxError, ValueError, ...
                raise _unpackable(err) from None
    for warning in caught:
        log.debug("Pillow warned while checking an image: %s", warning.message)


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
        with _pixel_limit_lifted(), Image.open(io.BytesIO(data)) as image:
            rgb: Image.Image = image.convert("RGB")
        return rgb

    def params(self) -> dict[str, Any]:
        """The original codec has no parameters; the EXIF choice is recorded for clarity."""
        return {"exif_transpose": False}


_CODECS: dict[str, type[OriginalCodec]] = {OriginalCodec.name: OriginalCodec}
CODECS: Mapping[str, type[OriginalCodec]] = MappingProxyType(_CODECS)


def codec_names() -> tuple[str, ...]:
    """Sorted names of the registered codecs (the CLI's ``--codec`` choices)."""
    return tuple(sorted(_CODECS))


def get_codec(name: str, params: Mapping[str, Any] | None = None) -> Codec:
    """Build the codec registered as ``name``; ``params`` as recorded in a manifest.

    Raises:
        UnknownNameError: no codec of that name; the message lists the choices.
    """
    try:
        cls = _CODECS[name]
    except KeyError:
        raise UnknownNameError(f"Unknown codec {name!r}; available: {', '.join(codec_names())}. "
                               "A dataset written by a newer packer may need an upgrade "
                               "(pip install -U packer).") from None
    codec = cls()
    expected = codec.params()
    if params is not None and dict(params) != expected:
        raise UnknownNameError(f"Codec {name!r} with parameters {dict(params)} is not supported by this "
                               f"packer (it knows {expected}); upgrade packer.")
    return codec
