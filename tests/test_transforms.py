"""Fast transforms: the fused path against the plain PIL reference, torchvision's crop
distribution, batch normalisation, and use from DataLoader workers.

The reference path is what torchvision does on PIL images, restated with PIL alone:
``Image.open(f).convert("RGB")``, then ``resize(size, BILINEAR, box=crop)`` (or crop then resize).
torchvision's ``RandomResizedCrop.get_params`` is restated literally below, independently of
packer's, so both the exact draws and their distribution can be compared.
"""

from __future__ import annotations

import io
import math
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from imagetools import encode, photo, standard_spec, write_tree, zoo
from PIL import Image, JpegImagePlugin
from torch.utils.data import DataLoader

import packer
from packer.format.codecs import PixelsCodec, pixels_array
from packer.read import speedups
from packer.read.transforms import (
    DECODERS,
    IMAGENET_MEAN,
    IMAGENET_STD,
    RESAMPLERS,
    CenterCropResize,
    Normalize,
    RandomResizedCropFlip,
    center_crop_box,
    crop_resize,
    random_resized_crop_params,
    to_uint8_tensor,
)

BILINEAR = Image.Resampling.BILINEAR

#: The resamplers and decoders this machine has (OpenCV and simplejpeg come with packer-shards[fast]).
HERE_RESAMPLERS = [name for name in RESAMPLERS if name != "opencv" or speedups.opencv() is not None]
HERE_DECODERS = [name for name in DECODERS if name != "simplejpeg" or speedups.simplejpeg() is not None]
#: How close each array resampler stays to Pillow's on the smooth test photos here: largest
#: and mean absolute difference, PSNR. torch follows Pillow's filter; OpenCV's bilinear
#: (used where the crop is enlarged) rounds a little differently (see packer.read.resampling).
CLOSE = {"torch": (2, 0.5, 45.0), "opencv": (3, 0.5, 45.0)}


def assert_close_to_pil(got: np.ndarray, expected: np.ndarray, resampler: str) -> None:
    worst, mean, psnr = diff(got, expected)
    if resampler == "pil":
        assert worst == 0, (worst, mean, psnr)
        return
    most, most_mean, least_psnr = CLOSE[resampler]
    assert worst <= most and mean <= most_mean and psnr >= least_psnr, (resampler, worst, mean, psnr)

# ---------------------------------------------------------------- references


def torchvision_get_params(height: int, width: int, scale: tuple[float, float], ratio: tuple[float, float],
                           generator: torch.Generator | None = None) -> tuple[int, int, int, int]:
    """torchvision 0.2x ``RandomResizedCrop.get_params``, line by line (plus a generator)."""
    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1], generator=generator).item()
        aspect_ratio = torch.exp(
            torch.empty(1).uniform_(log_ratio[0], log_ratio[1], generator=generator)  # type: ignore[arg-type]
        ).item()
        w = int(round(math.sqrt(target_area * aspect_ratio)))  # noqa: RUF046 (verbatim)
        h = int(round(math.sqrt(target_area / aspect_ratio)))  # noqa: RUF046
        if 0 < w <= width and 0 < h <= height:
            i = torch.randint(0, height - h + 1, size=(1,), generator=generator).item()
            j = torch.randint(0, width - w + 1, size=(1,), generator=generator).item()
            return int(i), int(j), h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))  # noqa: RUF046
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))  # noqa: RUF046
    else:
        w = width
        h = height
    return (height - h) // 2, (width - w) // 2, h, w


def slipped_get_params(height: int, width: int, slip: str,
                       generator: torch.Generator) -> tuple[int, int, int, int]:
    """``get_params`` with one plausible mistake, to show the distribution test would catch it."""
    for _ in range(10):
        u = torch.empty(1).uniform_(0.08, 1.0, generator=generator).item()
        target_area = height * width * (u if slip != "uniform_side" else (u ** 0.5 * (1 - 0.08 ** 0.5)
                                                                          + 0.08 ** 0.5) ** 2)
        v = torch.empty(1).uniform_(0.0, 1.0, generator=generator).item()
        aspect = 3 / 4 + v * (4 / 3 - 3 / 4) if slip == "uniform_ratio" else (3 / 4) * (16 / 9) ** v
        w, h = round(math.sqrt(target_area * aspect)), round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            i = int(torch.randint(0, height - h + 1, size=(1,), generator=generator).item())
            j = int(torch.randint(0, width - w + 1, size=(1,), generator=generator).item())
            return i, j, h, w
    return 0, 0, height, width


def reference(data: bytes, box: tuple[float, ...], size: tuple[int, int], flip: bool = False) -> np.ndarray:
    """Full decode, ``convert("RGB")``, one box resize to ``size`` (height, width), HWC."""
    image = Image.open(io.BytesIO(data)).convert("RGB").resize((size[1], size[0]), BILINEAR, box=box)
    if flip:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(image)


def hwc(tensor: torch.Tensor) -> np.ndarray:
    assert tensor.dtype == torch.uint8 and tensor.is_contiguous() and tensor.shape[0] == 3
    return tensor.permute(1, 2, 0).numpy()


def diff(a: np.ndarray, b: np.ndarray) -> tuple[int, float, float]:
    """Max and mean absolute difference, and PSNR in dB."""
    d = a.astype(np.float64) - b.astype(np.float64)
    mse = float((d ** 2).mean())
    return int(np.abs(d).max()), float(np.abs(d).mean()), 10 * math.log10(255 ** 2 / max(mse, 1e-12))


def png(image: Image.Image) -> bytes:
    return encode(image, "PNG")


def jpeg(image: Image.Image, quality: int = 90) -> bytes:
    return encode(image, "JPEG", quality=quality)


def ks(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between empirical CDFs."""
    a, b = np.sort(a), np.sort(b)
    points = np.concatenate([a, b])
    return float(np.abs(np.searchsorted(a, points, "right") / len(a)
                        - np.searchsorted(b, points, "right") / len(b)).max())


@pytest.fixture
def decode_scales(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The reduction of every reduced JPEG decode (1/2, 1/4, 1/8) that either decoder made."""
    scales: list[int] = []
    draft = JpegImagePlugin.JpegImageFile.draft

    def spy_draft(self: Any, mode: Any, size: Any) -> Any:
        width = self.size[0]
        result = draft(self, mode, size)
        if result is not None:
            scales.append(round(width / self.size[0]))
        return result

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", spy_draft)
    module = speedups.simplejpeg()
    if module is not None:
        decode, header = module.decode_jpeg, module.decode_jpeg_header

        def spy_decode(data: Any, *args: Any, **kwargs: Any) -> np.ndarray:
            array = decode(data, *args, **kwargs)
            if array.shape[1] < header(data)[1]:
                scales.append(round(header(data)[1] / array.shape[1]))
            return array

        monkeypatch.setattr(module, "decode_jpeg", spy_decode)
    return scales


# ---------------------------------------------------------------- crop parameters

SIZES = [(500, 375), (300, 600), (64, 48), (150, 600), (600, 100), (1, 1), (7, 3)]
SCALES = [(0.08, 1.0), (0.5, 1.0), (0.9, 1.0), (1.0, 1.0)]


def test_params_are_torchvisions_draw_for_draw() -> None:
    mine, theirs = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for width, height in SIZES:
        for scale in SCALES:
            for _ in range(150):
                got = random_resized_crop_params(width, height, scale, (3 / 4, 4 / 3), mine)
                assert got == torchvision_get_params(height, width, scale, (3 / 4, 4 / 3), theirs)
                i, j, h, w = got
                assert 0 <= i <= i + h <= height and 0 <= j <= j + w <= width and h > 0 and w > 0


def _sample(draw: Callable[[], tuple[int, int, int, int]], n: int, width: int,
            height: int) -> dict[str, np.ndarray]:
    p = np.array([draw() for _ in range(n)], dtype=np.float64)
    i, j, h, w = p.T
    return {"area": h * w / (width * height), "log_ratio": np.log(w / h),
            "center_y": (i + h / 2) / height, "center_x": (j + w / 2) / width}


@pytest.mark.parametrize(("width", "height"), [(500, 375), (300, 600)])
def test_param_distribution_matches_torchvision(width: int, height: int) -> None:
    """Independent seeds: two-sample KS per statistic; D < 0.025 is p > 1e-5 at n = 20000."""
    n, scale, ratio = 20_000, (0.08, 1.0), (3 / 4, 4 / 3)
    mine, theirs = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    ours = _sample(lambda: random_resized_crop_params(width, height, scale, ratio, mine), n, width, height)
    ref = _sample(lambda: torchvision_get_params(height, width, scale, ratio, theirs), n, width, height)
    for name in ours:
        assert ks(ours[name], ref[name]) < 0.025, name
    # The test has power: plausible slips (a uniform ratio, a uniform side) are caught.
    for slip in ("uniform_ratio", "uniform_side"):
        slipped = torch.Generator().manual_seed(3)
        bad = _sample(lambda: slipped_get_params(height, width, slip, slipped), n, width, height)  # noqa: B023
        assert max(ks(bad[name], ref[name]) for name in ref) > 0.05, slip


@pytest.mark.parametrize(("width", "height", "scale"), [(300, 600, (0.5, 1.0)), (150, 600, (0.08, 1.0))])
def test_fallback_frequency_matches_torchvision(width: int, height: int, scale: tuple[float, float]) -> None:
    n = 6000
    fallback = (0, (height - round(width / 0.75)) // 2, round(width / 0.75), width)  # (j, i, h, w)

    def rate(draw: Callable[[], tuple[int, int, int, int]]) -> float:
        hits = 0
        for _ in range(n):
            i, j, h, w = draw()
            hits += (j, i, h, w) == fallback
        return hits / n

    mine, theirs = torch.Generator().manual_seed(11), torch.Generator().manual_seed(12)
    a = rate(lambda: random_resized_crop_params(width, height, scale, generator=mine))
    b = rate(lambda: torchvision_get_params(height, width, scale, (3 / 4, 4 / 3), theirs))
    sigma = math.sqrt(2 * b * (1 - b) / n)
    assert 0.05 < b < 0.6 and abs(a - b) < 4 * sigma


def test_fallback_is_a_central_crop_clamped_to_ratio() -> None:
    assert random_resized_crop_params(100, 400, (0.9, 1.0)) == (133, 0, 133, 100)  # tall: ratio 3/4
    assert random_resized_crop_params(400, 100, (0.9, 1.0)) == (0, 133, 100, 133)  # wide: ratio 4/3
    assert random_resized_crop_params(50, 50, (2.0, 3.0)) == (0, 0, 50, 50)  # in range: whole image


def test_flip_rate_and_extremes() -> None:
    half = np.zeros((8, 8, 3), np.uint8)
    half[:, 4:] = 255
    image = Image.fromarray(half)
    n = 20_000
    flips = RandomResizedCropFlip((1, 2), scale=(1.0, 1.0), ratio=(1.0, 1.0),
                                  generator=torch.Generator().manual_seed(0))
    rate = sum(int(flips(image)[0, 0, 0]) > 128 for _ in range(n)) / n
    assert abs(rate - 0.5) < 3 * math.sqrt(0.25 / n)
    for p, expected in [(0.0, False), (1.0, True)]:
        never_or_always = RandomResizedCropFlip((1, 2), (1.0, 1.0), (1.0, 1.0), flip_p=p)
        assert {int(never_or_always(image)[0, 0, 0]) > 128 for _ in range(50)} == {expected}


def test_seeded_generator_is_deterministic() -> None:
    data = jpeg(photo(120, 90))
    first, second, other = (RandomResizedCropFlip(32, generator=torch.Generator().manual_seed(s))
                            for s in (7, 7, 8))
    a = [first(data) for _ in range(20)]
    assert all(torch.equal(x, second(data)) for x in a)
    assert not all(torch.equal(x, other(data)) for x in a)


@pytest.mark.parametrize("seed", range(8))
def test_transform_replays_torchvisions_pipeline(seed: int) -> None:
    """Under one global seed: torchvision's draws, then its flip draw, then the same pixels."""
    data = png(photo(97, 61, seed))
    size = (24, 40)  # (height, width), non-square, to catch swapped axes
    torch.manual_seed(seed)
    got = hwc(RandomResizedCropFlip(size, scale=(0.2, 1.0), resampler="pil")(data))
    torch.manual_seed(seed)
    i, j, h, w = torchvision_get_params(61, 97, (0.2, 1.0), (3 / 4, 4 / 3))
    flip = bool(torch.rand(1) < 0.5)
    box = (j, i, j + w, i + h)
    np.testing.assert_array_equal(got, reference(data, box, size, flip))
    # torchvision crops then resizes: the same within float rounding, but for the border
    # pixels, whose filter sees past the box here.
    literal = Image.open(io.BytesIO(data)).convert("RGB").crop(box).resize((40, 24), BILINEAR)
    if flip:
        literal = literal.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    assert diff(got[1:-1, 1:-1], np.asarray(literal)[1:-1, 1:-1])[0] <= 1
    # The array resamplers clamp at the crop's edge too: close everywhere, border included.
    for resampler in HERE_RESAMPLERS:
        torch.manual_seed(seed)
        fast = hwc(RandomResizedCropFlip(size, scale=(0.2, 1.0), resampler=resampler)(data))
        if resampler != "pil":
            assert_close_to_pil(fast, np.asarray(literal), resampler)


# ---------------------------------------------------------------- the fused path against the reference


BOXES = [(0, 0, 97, 61), (10, 5, 60, 50), (0.5, 3.25, 96.5, 40.75), (96, 60, 97, 61)]


@pytest.mark.parametrize("box", BOXES)
@pytest.mark.parametrize("size", [(16, 16), (50, 30), (120, 200)])
def test_png_fast_path_is_the_reference(box: tuple[float, ...], size: tuple[int, int]) -> None:
    data = png(photo(97, 61, 3))
    for flip in (False, True):
        expected = reference(data, box, size, flip)
        np.testing.assert_array_equal(hwc(crop_resize(data, box, size, flip=flip, resampler="pil")), expected)
        pil = Image.open(io.BytesIO(data)).convert("RGB")
        np.testing.assert_array_equal(hwc(crop_resize(pil, box, size, flip=flip, resampler="pil")), expected)


@pytest.mark.parametrize("decoder", HERE_DECODERS)
@pytest.mark.parametrize(("box", "size", "scale"), [
    ((0, 0, 640, 480), (224, 224), 2), ((40, 30, 600, 470), (100, 120), 4),
    ((0, 0, 640, 480), (32, 32), 8), ((300, 100, 620, 420), (150, 150), 2),
    ((100, 50, 400, 350), (160, 160), 1),
])
def test_jpeg_draft_path_is_close_to_the_reference(decode_scales: list[int], box: tuple[float, ...],
                                                   size: tuple[int, int], scale: int, decoder: str) -> None:
    data = jpeg(photo(640, 480, 4))
    expected = reference(data, box, size)
    exact = {"decoder": decoder, "resampler": "torch"}
    worst, mean, psnr = diff(hwc(crop_resize(data, box, size, draft_gap=1.0, **exact)), expected)
    assert decode_scales == ([scale] if scale > 1 else [])
    assert mean < 4 and psnr > 30, (worst, mean, psnr)
    # A larger gap decodes at a finer scale: closer still; math.inf never reduces.
    assert diff(hwc(crop_resize(data, box, size, draft_gap=2.0, **exact)), expected)[2] >= psnr - 0.01
    worst, mean, _ = diff(hwc(crop_resize(data, box, size, draft_gap=math.inf, resampler="pil",
                                          decoder=decoder)), expected)
    assert worst == 0


@pytest.mark.parametrize("name", sorted(zoo()))
def test_colour_modes_convert_like_imagefolder(name: str) -> None:
    data = zoo()[name]
    width, height = Image.open(io.BytesIO(data)).size
    box, size = (1, 0, width, height - 1), (5, 7)
    expected = reference(data, box, size)
    for decoder in HERE_DECODERS:
        exact = {"draft_gap": math.inf, "resampler": "pil", "decoder": decoder}
        np.testing.assert_array_equal(hwc(crop_resize(data, box, size, **exact)), expected)
        literal = Image.open(io.BytesIO(data)).convert("RGB").crop(box).resize((size[1], size[0]), BILINEAR)
        got = hwc(crop_resize(data, box, size, draft_gap=math.inf, resampler="torch", decoder=decoder))
        assert diff(got, np.asarray(literal))[0] <= 2
        # JPEGs here reduce to 1/2 at a gap of 1; the array resamplers then round the box to
        # whole half-scale pixels, which on a 5x7 output is a visible shift (the test above
        # holds it to 30 dB at real sizes).
        reduced = {"draft_gap": 1.0, "decoder": decoder}
        assert diff(hwc(crop_resize(data, box, size, resampler="pil", **reduced)), expected)[1] < 4
        for resampler in HERE_RESAMPLERS:
            assert diff(hwc(crop_resize(data, box, size, resampler=resampler, **reduced)), expected)[1] < 8
    np.testing.assert_array_equal(hwc(crop_resize(Image.open(io.BytesIO(data)), box, size, resampler="pil")),
                                  expected)


@pytest.mark.parametrize("decoder", HERE_DECODERS)
@pytest.mark.parametrize("mode", ["L", "CMYK"])
def test_gray_and_cmyk_jpegs_reduce_too(decode_scales: list[int], mode: str, decoder: str) -> None:
    data = jpeg(photo(400, 320, 5).convert(mode))
    box, size = (20, 10, 380, 300), (64, 64)
    got = hwc(crop_resize(data, box, size, decoder=decoder, resampler="torch"))
    worst, mean, psnr = diff(got, reference(data, box, size))
    assert decode_scales == [2] and mean < 4 and psnr > 30, (decode_scales, worst, mean, psnr)


# ---------------------------------------------------------------- the torch resampler and pixels records


@pytest.mark.parametrize("resampler", [name for name in HERE_RESAMPLERS if name != "pil"])
@pytest.mark.parametrize("box", BOXES)
@pytest.mark.parametrize("size", [(16, 16), (50, 30), (120, 200)])
def test_array_resamplers_are_close_to_pils(box: tuple[float, ...], size: tuple[int, int],
                                            resampler: str) -> None:
    """Sub-pixel boxes round to whole pixels, and the border differs; the rest agrees."""
    data = png(photo(97, 61, 3))
    for flip in (False, True):
        got = hwc(crop_resize(data, box, size, flip=flip, resampler=resampler))
        worst, mean, psnr = diff(got, reference(data, box, size, flip))
        assert mean < 2.5 and psnr > 30, (box, size, worst, mean, psnr)
        if box == (0, 0, 97, 61):  # whole pixels: only the filters differ
            assert_close_to_pil(got, reference(data, box, size, flip), resampler)


def pixels_record(image: Image.Image) -> bytes:
    return PixelsCodec().encode(png(image), check="full", max_pixels=10**8)


@pytest.mark.parametrize("resampler", HERE_RESAMPLERS)
def test_pixels_records_read_in_place_give_the_decoded_images_result(resampler: str) -> None:
    image = photo(120, 90, 8)
    record = pixels_record(image)
    view = pixels_array(record)
    assert view is not None and view.shape == (90, 120, 3) and not view.flags.writeable
    np.testing.assert_array_equal(view, np.asarray(image))
    decoded = PixelsCodec().decode(record)
    for box, size in [((0, 0, 120, 90), (90, 120)), ((7, 3, 100, 80), (32, 48)), ((0, 0, 30, 20), (64, 64))]:
        for flip in (False, True):
            got = crop_resize(record, box, size, flip=flip, resampler=resampler)
            assert torch.equal(got, crop_resize(decoded, box, size, flip=flip, resampler=resampler))
            got.fill_(0)  # a result is its own memory, never a view of the stored record
            np.testing.assert_array_equal(pixels_array(record), np.asarray(image))
    torch.manual_seed(1)
    train = RandomResizedCropFlip(40, resampler=resampler)(record)
    torch.manual_seed(1)
    assert torch.equal(train, RandomResizedCropFlip(40, resampler=resampler)(decoded))
    evaluate = CenterCropResize(64, 72, resampler=resampler)
    assert torch.equal(evaluate(record), evaluate(decoded))


def test_only_whole_pixels_records_are_read_in_place() -> None:
    record = pixels_record(photo(10, 8))
    assert pixels_array(record[:-1]) is None and pixels_array(b"PKPX") is None
    assert pixels_array(png(photo(10, 8))) is None
    with pytest.raises(OSError):  # neither a record nor an image: PIL's own error
        crop_resize(record[:-1], (0, 0, 4, 4), 4)


# ---------------------------------------------------------------- evaluation transform


def test_center_crop_box_follows_torchvisions_rounding() -> None:
    # Resize(256): 500x375 -> int(256 * 500 / 375) = 341 x 256.
    # CenterCrop(224): top round(16.0) = 16, left round(58.5) = 58 (Python rounds half to even).
    assert center_crop_box(500, 375) == pytest.approx((58 * 500 / 341, 16 * 375 / 256, 282 * 500 / 341,
                                                       240 * 375 / 256))
    assert center_crop_box(256, 256) == (16, 16, 240, 240)
    with pytest.raises(ValueError, match="larger than the resized"):
        center_crop_box(100, 100, 300, 256)


@pytest.mark.parametrize(("width", "height"), [(500, 375), (375, 500), (300, 300), (257, 1000), (1001, 999)])
def test_center_crop_resize_is_resize_then_center_crop(width: int, height: int) -> None:
    data = png(photo(width, height, 6))
    image = Image.open(io.BytesIO(data)).convert("RGB")
    short, long = sorted((width, height))
    new_long = int(256 * long / short)
    new_w, new_h = (256, new_long) if width <= height else (new_long, 256)
    top, left = int(round((new_h - 224) / 2.0)), int(round((new_w - 224) / 2.0))  # noqa: RUF046
    two_step = np.asarray(image.resize((new_w, new_h), BILINEAR).crop((left, top, left + 224, top + 224)))
    assert diff(hwc(CenterCropResize(224, 256, resampler="torch")(data)), two_step)[0] <= 1
    for resampler in HERE_RESAMPLERS:
        got = hwc(CenterCropResize(224, 256, resampler=resampler)(data))
        if resampler != "pil":
            assert_close_to_pil(got, two_step, resampler)
        np.testing.assert_array_equal(hwc(CenterCropResize(224, 256, resampler=resampler)(image)), got)


@pytest.mark.parametrize("decoder", HERE_DECODERS)
def test_center_crop_resize_reduces_large_jpegs(decode_scales: list[int], decoder: str) -> None:
    data = jpeg(photo(1200, 900, 7))
    expected = reference(data, center_crop_box(1200, 900), (224, 224))
    worst, mean, psnr = diff(hwc(CenterCropResize(draft_gap=1.0, decoder=decoder, resampler="torch")(data)),
                             expected)
    assert decode_scales == [2]
    assert mean < 4 and psnr > 30, (worst, mean, psnr)
    decode_scales.clear()
    CenterCropResize(decoder=decoder)(data)  # the default gap of 2: the crop is too small for 1/2
    CenterCropResize(decoder=decoder)(jpeg(photo(2400, 1800, 7)))
    assert decode_scales == [2]


# ---------------------------------------------------------------- batch normalisation


def test_normalize_values_and_dtypes() -> None:
    batch = torch.randint(0, 256, (4, 3, 5, 6), dtype=torch.uint8)
    mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float64).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD, dtype=torch.float64).view(3, 1, 1)
    expected = (batch.double() / 255 - mean) / std
    out = Normalize()(batch)
    assert out.dtype == torch.float32 and out.shape == batch.shape
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(Normalize()(batch[0]).double(), expected[0], atol=1e-5, rtol=0)
    half = Normalize(dtype=torch.bfloat16)(batch)
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.double(), expected, atol=0.02, rtol=0.01)
    custom = Normalize((0.5,), (0.25,))(torch.full((2, 1, 2, 2), 255, dtype=torch.uint8))
    torch.testing.assert_close(custom, torch.full((2, 1, 2, 2), 2.0))
    assert Normalize().state_dict() == {}


def test_normalize_into_a_reused_buffer() -> None:
    batch = torch.randint(0, 256, (4, 3, 5, 6), dtype=torch.uint8)
    expected = Normalize()(batch)
    buffer = torch.full(batch.shape, float("nan"))
    assert Normalize()(batch, out=buffer) is buffer
    torch.testing.assert_close(buffer, expected, atol=0, rtol=0)
    half = torch.empty(batch.shape, dtype=torch.bfloat16)
    torch.testing.assert_close(Normalize(dtype=torch.bfloat16)(batch, out=half), expected.bfloat16())
    for wrong in (torch.empty(3, 3, 5, 6), torch.empty(batch.shape, dtype=torch.float64)):
        with pytest.raises(ValueError, match="out must be"):
            Normalize()(batch, out=wrong)


def test_normalize_follows_the_input_device() -> None:
    norm = pickle.loads(pickle.dumps(Normalize()))
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        batch = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8, device=device)
        out = norm(batch)
        assert out.device == batch.device and norm.scale.device == batch.device
        torch.testing.assert_close(out.cpu(), Normalize()(batch.cpu()))


@pytest.mark.parametrize(("batch", "message"), [
    (torch.zeros(2, 3, 4, 4), "uint8"), (torch.zeros(2, 4, 4, 4, dtype=torch.uint8), "shape"),
    (torch.zeros(4, 4, dtype=torch.uint8), "shape"),
])
def test_normalize_rejects_what_it_would_get_wrong(batch: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Normalize()(batch)


# ---------------------------------------------------------------- validation and small API


@pytest.mark.parametrize(("make", "message"), [
    (lambda: RandomResizedCropFlip(0), "size"), (lambda: RandomResizedCropFlip((2, 3, 4)), "size"),
    (lambda: RandomResizedCropFlip(8, scale=(0.9, 0.1)), "scale"),
    (lambda: RandomResizedCropFlip(8, ratio=(2.0, 1.0)), "ratio"),
    (lambda: RandomResizedCropFlip(8, flip_p=1.5), "flip_p"),
    (lambda: RandomResizedCropFlip(8, draft_gap=0.5), "draft_gap"),
    (lambda: RandomResizedCropFlip(8, resampler="cv2"), "resampler"),
    (lambda: RandomResizedCropFlip(8, decoder="turbo"), "decoder"),
    (lambda: CenterCropResize(resampler="nearest"), "resampler"),
    (lambda: CenterCropResize(224, 200), "resize"), (lambda: Normalize((0.5,), (0.0,)), "std"),
    (lambda: Normalize(dtype=torch.int32), "dtype"),
    (lambda: crop_resize(png(photo(10, 10)), (0, 0, 11, 10), 4), "box"),
    (lambda: crop_resize(png(photo(10, 10)), (5, 0, 5, 10), 4), "box"),
])
def test_bad_arguments_raise_value_error(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_other_samples_raise_type_error() -> None:
    with pytest.raises(TypeError, match="PIL image or encoded bytes"):
        RandomResizedCropFlip(8)(np.zeros((4, 4, 3), np.uint8))  # type: ignore[arg-type]


def test_to_uint8_tensor_and_pickling() -> None:
    image = photo(5, 4).convert("P")
    tensor = to_uint8_tensor(image, flip=True)
    np.testing.assert_array_equal(hwc(tensor), np.asarray(image.convert("RGB"))[:, ::-1])
    assert tensor.numpy().flags.writeable
    crop = RandomResizedCropFlip(16, generator=torch.Generator().manual_seed(3))
    copy = pickle.loads(pickle.dumps(crop))
    data = png(photo(30, 20))
    assert torch.equal(copy(data), crop(data)) and repr(copy) == repr(crop)
    assert "resize=256" in repr(pickle.loads(pickle.dumps(CenterCropResize())))


# ---------------------------------------------------------------- DataLoader workers


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "forkserver", "spawn"])
def test_dataloader_workers_stack_uint8_batches(tmp_path: Path, start_method: str) -> None:
    """Bytes in the workers give the batches decoded images give (tiny images: no draft)."""
    dst = tmp_path / "dst"
    packer.convert(write_tree(tmp_path / "src", standard_spec()), dst, to="lmdb")

    def epoch(decode: bool) -> tuple[torch.Tensor, torch.Tensor]:
        dataset = packer.open_dataset(dst, transform=RandomResizedCropFlip(32), decode=decode)
        dataset[0]
        loader = DataLoader(dataset, batch_size=4, num_workers=2, multiprocessing_context=start_method)
        torch.manual_seed(0)
        batches = list(loader)
        assert all(images.dtype == torch.uint8 and images.shape[1:] == (3, 32, 32) for images, _ in batches)
        return torch.cat([images for images, _ in batches]), torch.cat([t for _, t in batches])

    images, targets = epoch(decode=False)
    assert targets.tolist() == list(packer.open_dataset(dst).targets)
    decoded, _ = epoch(decode=True)
    assert torch.equal(images, decoded)
    assert len({bytes(image.numpy()) for image in images}) == len(images)
    normalised = Normalize()(images)
    assert normalised.dtype == torch.float32
    torch.testing.assert_close(normalised[0, 1], (images[0, 1].float() / 255 - 0.456) / 0.224)
