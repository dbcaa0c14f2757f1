"""``check_image`` at every level names the same broken files, with the same reason, as the
check it replaced: a full Pillow decode of every pixel, then the RGB conversion.

``--check full`` now decodes JPEGs at 1/8 scale in grayscale (every coefficient is still
entropy-decoded); the reference below is the old full decode, written out here so that it
cannot drift with the module under test. Files that are not even readable (empty, dangling
symlink, FIFO) never reach ``check_image``: ``read_source`` names them at every level
(test_convert.py covers those).
"""

from __future__ import annotations

import io
import random
import warnings
from collections.abc import Callable

import pytest
from imagetools import (
    cmyk_jpeg,
    corrupt_png,
    encode,
    exif_rotated_jpeg,
    grayscale_jpeg,
    grayscale_png,
    html_as_jpeg,
    image_bytes,
    palette_png_with_transparency,
    photo,
    png16,
    png_bytes,
    rgb_image,
    rgba_png,
    truncated_jpeg,
    truncated_png,
)
from PIL import Image, ImageFile, UnidentifiedImageError

from packer.source.imagecheck import CHECK_LEVELS, check_image
from packer.source.sourcefile import UnpackableFile

MAX_PIXELS = 1 << 30
BOMB_LIMIT = 1500  # what test_convert's broken tree uses: its 40x40 PNG is a bomb

# ------------------------------------------------------------------ the reference: the old check


def reference(data: bytes, check: str, max_pixels: int = MAX_PIXELS) -> str | None:
    """The reason the check before draft decoding gave (None: the file passes)."""
    if check == "none":
        return None
    saved = Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES
    Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES = None, False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                image = Image.open(io.BytesIO(data))
            except UnidentifiedImageError:
                return "not_an_image"
            except Exception as err:  # noqa: BLE001 - what any decoder raises, as check_image
                return _named(err)
            if image.size[0] * image.size[1] > max_pixels:
                return "decompression_bomb"
            if check == "header":
                return None
            try:
                image.load()
                if image.mode != "RGB":
                    image.convert("RGB")
            except Exception as err:  # noqa: BLE001
                return _named(err)
            return None
    finally:
        Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES = saved


def _named(err: Exception) -> str:
    truncated = ("truncated", "Truncated File Read", "image file is truncated")
    if isinstance(err, OSError) and any(m in str(err) for m in truncated):
        return "truncated"
    return "decode_error"


def reason(data: bytes, check: str, max_pixels: int = MAX_PIXELS) -> str | None:
    """The reason ``check_image`` gives now (None: the file passes)."""
    try:
        check_image(data, check=check, max_pixels=max_pixels)
    except UnpackableFile as err:
        return err.reason
    return None


# ------------------------------------------------------------------ broken files


def _scan_start(jpeg: bytes) -> int:
    """Offset of the first entropy-coded byte (just after the SOS segment)."""
    sos = jpeg.index(b"\xff\xda")
    return sos + 2 + int.from_bytes(jpeg[sos + 2: sos + 4], "big")


def _mid_scan(jpeg: bytes) -> int:
    return (_scan_start(jpeg) + len(jpeg)) // 2


def _flipped(data: bytes, at: int, count: int = 8) -> bytes:
    damaged = bytearray(data)
    for i in range(at, at + count):
        damaged[i] ^= 0x5A
    return bytes(damaged)


def _baseline() -> bytes:
    return encode(photo(96, 72, 1), "JPEG", quality=90)


def _progressive() -> bytes:
    return encode(photo(96, 72, 2), "JPEG", quality=90, progressive=True)


def _inserted(data: bytes, at: int, insert: bytes) -> bytes:
    return data[:at] + insert + data[at:]


#: kind -> (bytes, reason at --check full, reason at --check header); --check none passes all.
#: The first block is the fault corpus of test_convert.py, test_faults.py and imagetools.
BROKEN: dict[str, tuple[Callable[[], bytes], str | None, str | None]] = {
    "truncated_jpeg": (truncated_jpeg, "truncated", None),
    "truncated_png": (truncated_png, "truncated", None),
    "corrupt_png": (corrupt_png, "decode_error", None),
    "html_as_jpeg": (html_as_jpeg, "not_an_image", "not_an_image"),
    "empty": (lambda: b"", "not_an_image", "not_an_image"),
    "junk": (lambda: b"junk", "not_an_image", "not_an_image"),
    "fake_jpeg_header": (lambda: b"\xff\xd8\xff\xe0 not really a jpeg", "truncated", "truncated"),
    "bomb_png": (lambda: png_bytes(40, 40, 2), "decompression_bomb", "decompression_bomb"),
    "bomb_jpeg": (lambda: image_bytes(".jpg", 40, 40, 2), "decompression_bomb", "decompression_bomb"),
    # JPEG damage inside the entropy-coded data, where draft decoding could differ, and isn't:
    "jpeg_cut_mid_scan": (lambda: _baseline()[:_mid_scan(_baseline())], "truncated", None),
    "jpeg_cut_at_scan_start": (lambda: _baseline()[:_scan_start(_baseline())], "truncated", None),
    "jpeg_no_eoi": (lambda: _baseline()[:-2], "truncated", None),
    "jpeg_cut_last_4": (lambda: _baseline()[:-4], "truncated", None),
    "jpeg_second_soi_mid_scan": (lambda: _inserted(_baseline(), _mid_scan(_baseline()), b"\xff\xd8"),
                                 "decode_error", None),
    "jpeg_sof_mid_scan": (lambda: _inserted(_baseline(), _mid_scan(_baseline()), b"\xff\xc0"),
                          "decode_error", None),
    # libjpeg only warns about these and decodes garbage: the full decode packed them too
    "jpeg_corrupt_scan": (lambda: _flipped(_baseline(), _mid_scan(_baseline())), None, None),
    "jpeg_unknown_marker_mid_scan": (lambda: _inserted(_baseline(), _mid_scan(_baseline()), b"\xff\x01"),
                                     None, None),
    "progressive_cut_mid_scan": (lambda: _progressive()[:len(_progressive()) * 2 // 3], "truncated", None),
    "progressive_corrupt_scan": (lambda: _flipped(_progressive(), _mid_scan(_progressive())), None, None),
    "cmyk_jpeg_truncated": (lambda: cmyk_jpeg()[:len(cmyk_jpeg()) * 3 // 4], "truncated", None),
    "gray_jpeg_truncated": (lambda: grayscale_jpeg()[:len(grayscale_jpeg()) * 3 // 4], "truncated", None),
    # other formats (decoded in full, as before)
    "webp_truncated": (lambda: image_bytes(".webp", 32, 32)[:60], "decode_error", "decode_error"),
    "bmp_truncated": (lambda: image_bytes(".bmp", 32, 32)[:1500], "truncated", None),
    "tiff_truncated": (lambda: image_bytes(".tif", 32, 32)[:1500], "truncated", None),
    "ppm_truncated": (lambda: image_bytes(".ppm", 32, 32)[:1500], "truncated", None),
}


@pytest.mark.parametrize("check", CHECK_LEVELS)
@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_kind_gets_the_reason_the_full_decode_gave(kind: str, check: str) -> None:
    make, full, header = BROKEN[kind]
    data, limit = make(), BOMB_LIMIT if kind.startswith("bomb") else MAX_PIXELS
    expected = {"full": full, "header": header, "none": None}[check]
    assert reference(data, check, limit) == expected, "the table above no longer describes the reference"
    assert reason(data, check, limit) == expected


# ------------------------------------------------------------------ valid files


VALID: dict[str, Callable[[], bytes]] = {
    "jpeg_baseline": lambda: encode(photo(120, 90, 3), "JPEG", quality=90),
    "jpeg_progressive": lambda: encode(photo(120, 90, 4), "JPEG", quality=90, progressive=True),
    "jpeg_444": lambda: encode(photo(60, 40, 5), "JPEG", quality=95, subsampling=0),
    "jpeg_restart_markers": lambda: encode(photo(60, 40, 6), "JPEG", quality=90, restart_marker_blocks=2),
    "jpeg_tiny_5x3": lambda: encode(photo(5, 3, 7), "JPEG", quality=90),
    "jpeg_grayscale": grayscale_jpeg,
    "jpeg_grayscale_progressive": lambda: encode(photo(40, 30, 8).convert("L"), "JPEG", progressive=True),
    "jpeg_cmyk": cmyk_jpeg,
    "jpeg_cmyk_progressive": lambda: encode(photo(40, 30, 9).convert("CMYK"), "JPEG", progressive=True),
    "jpeg_exif_rotated": exif_rotated_jpeg,
    "png": lambda: png_bytes(20, 15, 1),
    "png_grayscale": grayscale_png,
    "png_rgba": rgba_png,
    "png_palette_transparency": palette_png_with_transparency,
    "png_16_bit": png16,
    "webp_lossless": lambda: image_bytes(".webp", 20, 15, 2),
    "webp_lossy": lambda: encode(rgb_image(20, 15, 3), "WEBP", quality=80),
    "bmp": lambda: image_bytes(".bmp", 20, 15, 4),
    "tiff": lambda: image_bytes(".tif", 20, 15, 5),
    "ppm": lambda: image_bytes(".ppm", 20, 15, 6),
    "gif": lambda: encode(rgb_image(20, 15, 7), "GIF"),
}


@pytest.mark.parametrize("check", CHECK_LEVELS)
@pytest.mark.parametrize("kind", sorted(VALID))
def test_valid_image_passes(kind: str, check: str) -> None:
    data = VALID[kind]()
    assert reference(data, check) is None
    assert reason(data, check) is None


# ------------------------------------------------------------------ random damage


def _damaged(data: bytes, rng: random.Random) -> bytes:
    """One random kind of damage: a cut, flipped or overwritten bytes, a marker, a gap, junk."""
    kind, at = rng.randrange(6), rng.randrange(2, len(data))
    if kind == 0:
        return data[:at]
    damaged = bytearray(data)
    if kind == 1:
        damaged[at] ^= 1 << rng.randrange(8)
    elif kind == 2:
        damaged[at: at + 16] = bytes(len(damaged[at: at + 16]))
    elif kind == 3:
        damaged[at:at] = bytes([0xFF, rng.choice([0xD8, 0xD9, 0xDA, 0xC0, 0xC4, 0xDB, 0xDD, 0xD0, 0xD5,
                                                  0x01, 0xFE, 0xE1])])
    elif kind == 4:
        del damaged[at: at + rng.randrange(1, 100)]
    else:
        damaged[at:at] = rng.randbytes(rng.randrange(1, 100))
    return bytes(damaged)


@pytest.mark.parametrize("kind", ["jpeg_baseline", "jpeg_progressive", "jpeg_restart_markers",
                                  "jpeg_grayscale", "jpeg_cmyk", "png", "webp_lossy"])
def test_random_damage_gets_the_reason_the_full_decode_gave(kind: str) -> None:
    rng = random.Random(kind)
    source = VALID[kind]()
    cases = [_damaged(source, rng) for _ in range(150)]
    cases += [source[:cut] for cut in range(max(0, len(source) - 24), len(source))]  # the tail
    mismatches = [(i, reference(data, "full"), reason(data, "full"))
                  for i, data in enumerate(cases)
                  if reference(data, "full") != reason(data, "full")]
    assert not mismatches
    outcomes = {reference(data, "full") for data in cases}
    assert len(outcomes) >= 2  # the damage is varied enough to tell decoders apart
    if kind.startswith("jpeg"):
        assert outcomes >= {None, "truncated"}


def test_full_check_leaves_pillow_settings_as_they_were() -> None:
    saved = Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES
    with pytest.raises(UnpackableFile):
        check_image(_baseline()[:-300], check="full", max_pixels=MAX_PIXELS)
    check_image(_baseline(), check="full", max_pixels=MAX_PIXELS)
    assert (Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES) == saved


def test_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="check must be one of full, header, none"):
        check_image(b"", check="deep", max_pixels=1)
