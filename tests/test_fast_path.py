"""The fast path's parts: decoders, accelerators and their fallbacks, batch transforms,
uncopied batches through default_collate, reused read memory, and how close the pixels stay
to torchvision's.

The accelerators (simplejpeg, OpenCV) come with ``packer-shards[fast]``; tests that need one skip
without it, and CI runs this module both with and without the extra installed.
"""

from __future__ import annotations

import io
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from imagetools import cmyk_jpeg, encode, photo, truncated_jpeg, write_tree
from PIL import Image
from torch.utils.data import DataLoader, default_collate

import packer
from packer.errors import MissingExtraError
from packer.format.backends import Backend
from packer.format.backends.base import Arena
from packer.format.codecs import PixelsCodec
from packer.read import speedups
from packer.read.batching import BatchSample
from packer.read.decoding import open_picture, resolve_decoder
from packer.read.resampling import resolve_resampler
from packer.read.transforms import (
    BatchTransform,
    CenterCropResize,
    Normalize,
    RandomResizedCropFlip,
    crop_resize,
    random_resized_crop_params,
)

needs_simplejpeg = pytest.mark.skipif(speedups.simplejpeg() is None, reason="simplejpeg not installed")
needs_opencv = pytest.mark.skipif(speedups.opencv() is None, reason="OpenCV not installed")
HERE_RESAMPLERS = ["torch", "pil"] + (["opencv"] if speedups.opencv() is not None else [])


def jpeg(image: Image.Image, **params: object) -> bytes:
    return encode(image, "JPEG", quality=90, **params)


# ---------------------------------------------------------------- decoders


@needs_simplejpeg
@pytest.mark.parametrize("variant", ["420", "422", "444", "grey", "progressive"])
@pytest.mark.parametrize("reduce", [1, 2, 4, 8])
def test_simplejpeg_gives_pillows_pixels_at_every_scale(variant: str, reduce: int) -> None:
    image = photo(203, 141, 2)
    params: dict[str, object] = {"subsampling": {"420": 2, "422": 1, "444": 0}.get(variant, 2)}
    if variant == "grey":
        image = image.convert("L")
    if variant == "progressive":
        params["progressive"] = True
    data = jpeg(image, **params)
    fast, slow = open_picture(data, "simplejpeg"), open_picture(data, "pil")
    assert type(fast).__name__ == "_SimpleJpegPicture" and (fast.width, fast.height) == (203, 141)
    got, applied = fast.pixels(reduce)
    expected, expected_applied = slow.pixels(reduce)
    assert applied == expected_applied == reduce
    assert got.shape == (-(-141 // reduce), -(-203 // reduce), 3)
    np.testing.assert_array_equal(got, expected)
    slow.close()


@needs_simplejpeg
def test_what_simplejpeg_should_not_decode_goes_to_pillow() -> None:
    # CMYK: Pillow converts it its own way; a damaged stream: Pillow's error, as decode=True.
    cmyk = cmyk_jpeg()
    assert type(open_picture(cmyk, "simplejpeg")).__name__ == "_PilPicture"
    np.testing.assert_array_equal(crop_resize(cmyk, (0, 0, 8, 8), 8, decoder="simplejpeg", resampler="pil"),
                                  crop_resize(cmyk, (0, 0, 8, 8), 8, decoder="pil", resampler="pil"))
    broken = truncated_jpeg()
    with pytest.raises(OSError) as pil_error:
        crop_resize(broken, (0, 0, 4, 4), 4, decoder="pil")
    with pytest.raises(OSError) as fast_error:
        crop_resize(broken, (0, 0, 4, 4), 4, decoder="simplejpeg")
    assert str(fast_error.value) == str(pil_error.value)


def test_auto_takes_the_accelerators_when_present_and_names_the_extra_when_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_decoder("auto") == ("simplejpeg" if speedups.simplejpeg() else "pil")
    assert resolve_resampler("auto") == ("opencv" if speedups.opencv() else "torch")
    monkeypatch.setattr(speedups, "_load", lambda module: None)  # as if not installed
    monkeypatch.setattr(speedups, "_cv2_ready", None)
    assert resolve_decoder("auto") == "pil" and resolve_resampler("auto") == "torch"
    assert RandomResizedCropFlip(8).resampler == "torch" and CenterCropResize().decoder == "pil"
    with pytest.raises(MissingExtraError, match=r"pip install 'packer-shards\[fast\]'") as missing:
        RandomResizedCropFlip(8, resampler="opencv")
    assert isinstance(missing.value, ImportError) and "opencv-python-headless" in str(missing.value)
    with pytest.raises(MissingExtraError, match="simplejpeg"):
        crop_resize(jpeg(photo(8, 8)), (0, 0, 8, 8), 4, decoder="simplejpeg")
    assert speedups.accelerators() == {"simplejpeg": None, "opencv": None}


@needs_opencv
def test_opencv_runs_on_one_thread_once_packer_uses_it() -> None:
    import cv2

    cv2.setNumThreads(2)
    speedups._forget_cv2_setting()  # as in a freshly forked process
    crop_resize(encode(photo(40, 30), "PNG"), (0, 0, 40, 30), 16, resampler="opencv")
    assert cv2.getNumThreads() == 1


# ---------------------------------------------------------------- batch transforms


def samples_of_every_kind() -> list[bytes]:
    pictures = [photo(160 + 7 * k, 120 + 5 * k, k) for k in range(6)]
    return [jpeg(pictures[0]), encode(pictures[1], "PNG"), jpeg(pictures[2].convert("L")),
            PixelsCodec().encode(encode(pictures[3], "PNG"), check="full", max_pixels=10**8),
            jpeg(pictures[4], subsampling=0), jpeg(pictures[5])]


@pytest.mark.parametrize("resampler", HERE_RESAMPLERS)
@pytest.mark.parametrize("make", [lambda r: RandomResizedCropFlip(48, resampler=r),
                                  lambda r: CenterCropResize(40, 48, resampler=r)])
def test_a_batch_is_the_samples_one_by_one(resampler: str, make: object) -> None:
    transform = make(resampler)  # type: ignore[operator]
    assert isinstance(transform, BatchTransform)
    samples = samples_of_every_kind()
    torch.manual_seed(5)
    one_by_one = torch.stack([transform(sample) for sample in samples])
    torch.manual_seed(5)
    batch = transform.batch(samples)
    assert batch.dtype == torch.uint8 and batch.is_contiguous() and torch.equal(batch, one_by_one)
    out = torch.empty_like(batch)
    torch.manual_seed(5)
    assert transform.batch([memoryview(s) for s in samples], out=out) is out and torch.equal(out, batch)
    with pytest.raises(ValueError, match="out must be"):
        transform.batch(samples, out=torch.empty(len(samples), 3, 8, 8, dtype=torch.uint8))


def test_batch_samples_collate_to_the_batch_itself(tmp_path: Path, backend: Backend) -> None:
    src = write_tree(tmp_path / "src", {f"c{k % 2}/{k}.jpg": jpeg(photo(90 + k, 70, k)) for k in range(10)})
    dst = tmp_path / "dst"
    packer.convert(src, dst, to=backend.name)
    transform = RandomResizedCropFlip(32)
    fast = packer.open_dataset(dst, transform=transform, decode=False, target_transform=lambda t: t * 10)
    indices = [7, 2, 9, 0]
    torch.manual_seed(1)
    samples = fast.__getitems__(indices)
    assert all(isinstance(s, BatchSample) and isinstance(s, tuple) and len(s) == 2 for s in samples)
    images, targets = default_collate(samples)
    assert images is samples[0].images and images.shape == (4, 3, 32, 32)
    assert targets.tolist() == [10 * fast.targets[i] for i in indices]
    torch.manual_seed(1)
    assert torch.equal(images, torch.stack([transform(fast._shards.read(i)) for i in indices]))
    # A custom collate sees plain (image, target) tuples; part of a batch is copied as usual.
    assert all(torch.equal(image, images[k]) for k, (image, _) in enumerate(samples))
    some_images, _ = default_collate(samples[1:3])
    assert some_images is not images and torch.equal(some_images, images[1:3])
    # Other transforms, or decode=True, keep the sample-by-sample path.
    plain = packer.open_dataset(dst, transform=lambda image: image.size, decode=True)
    assert not any(isinstance(s, BatchSample) for s in plain.__getitems__(indices))


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_batches_from_workers_arrive_whole(tmp_path: Path, start_method: str) -> None:
    src = write_tree(tmp_path / "src", {f"c{k % 3}/{k}.jpg": jpeg(photo(80, 64 + k, k)) for k in range(24)})
    dst = tmp_path / "dst"
    packer.convert(src, dst, to="lmdb", codec="pixels")
    dataset = packer.open_dataset(dst, transform=RandomResizedCropFlip(24), decode=False)
    dataset[0]  # the parent has used the readers (and OpenCV, when installed) before forking
    loader = DataLoader(dataset, batch_size=5, num_workers=2, multiprocessing_context=start_method,
                        persistent_workers=True)
    for _ in range(2):
        batches = list(loader)
        assert [len(images) for images, _ in batches] == [5, 5, 5, 5, 4]
        assert torch.cat([t for _, t in batches]).tolist() == list(dataset.targets)
        assert all(images.is_contiguous() and images.dtype == torch.uint8 for images, _ in batches)


# ---------------------------------------------------------------- reused read memory


def test_read_batch_equals_read_many_and_reuses_its_memory(tmp_path: Path, backend: Backend) -> None:
    src = write_tree(tmp_path / "src", {f"c{k % 2}/{k}.png": encode(photo(30 + k, 20, k), "PNG")
                                        for k in range(12)})
    dst = tmp_path / "dst"
    packer.convert(src, dst, to=backend.name, shard_size="8KB", codec="pixels")
    shards = packer.open_dataset(dst, decode=False)._shards
    assert len(shards.readers) > 1
    wanted = [11, 0, 5, 3, 3, 8]
    views = shards.read_batch(wanted)
    assert [bytes(v) for v in views] == shards.read_many(wanted)
    first = bytes(views[0])
    shards.read_batch([1, 2])  # the next batch reuses the memory
    assert bytes(views[0]) != first


def test_arena_grows_without_moving_views_already_taken() -> None:
    arena = Arena()
    small = arena.take(10)
    small[:] = b"0123456789"
    big = arena.take(5 << 20)  # more than the buffer holds: a new buffer
    big[:3] = b"abc"
    assert bytes(small) == b"0123456789" and bytes(big[:3]) == b"abc"
    arena.reset()
    assert arena.take(4).obj is big.obj


# ---------------------------------------------------------------- normalisation


@pytest.mark.parametrize("shape", [(1, 3, 224, 224), (7, 3, 224, 224), (3, 5, 3, 9, 11)])
def test_normalize_in_cache_equals_one_pass(shape: tuple[int, ...]) -> None:
    batch = torch.randint(0, 256, shape, dtype=torch.uint8)
    norm = Normalize()
    expected = batch.to(torch.float32).mul_(norm.scale).add_(norm.shift)
    torch.testing.assert_close(norm(batch), expected, atol=0, rtol=0)
    out = torch.empty(shape)
    torch.testing.assert_close(norm(batch, out=out), expected, atol=0, rtol=0)
    strided = torch.empty((*shape[:-1], shape[-1] * 2))[..., ::2]
    torch.testing.assert_close(norm(batch, out=strided), expected, atol=0, rtol=0)


# ---------------------------------------------------------------- fidelity


def literal_torchvision(data: bytes, box: tuple[int, int, int, int], size: int, flip: bool) -> np.ndarray:
    """``RandomResizedCrop`` + flip on a PIL image, as torchvision runs it: crop, resize, mirror."""
    top, left, height, width = box
    image = Image.open(io.BytesIO(data)).convert("RGB").crop((left, top, left + width, top + height))
    image = image.resize((size, size), Image.Resampling.BILINEAR)
    return np.asarray(image.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if flip else image)


#: Mean absolute difference and PSNR (of the pooled squared error) that each resampler must keep
#: against torchvision on these photo-like images; measured here: torch 0.007 / 69.9 dB,
#: pil 0.012 / 67.0 dB, OpenCV 0.10 / 58.2 dB. The README has the figures on real photos.
FIDELITY = {"torch": (0.05, 62.0), "pil": (0.05, 62.0), "opencv": (0.2, 54.0)}


def fidelity(resampler: str, count: int = 40) -> tuple[float, float]:
    """MAD and PSNR of the fast path against torchvision, same crop boxes and flips, with the
    transform's default decoder and draft gap."""
    generator = torch.Generator().manual_seed(0)
    transform = RandomResizedCropFlip(64, resampler=resampler)
    errors = []
    for k in range(count):
        data = jpeg(photo(96 + 5 * k, 72 + 3 * (k % 9), k))
        width, height = Image.open(io.BytesIO(data)).size
        box = random_resized_crop_params(width, height, generator=generator)
        flip = k % 2 == 1
        got = crop_resize(data, (box[1], box[0], box[1] + box[3], box[0] + box[2]), 64, flip=flip,
                          resampler=resampler, decoder=transform.decoder, draft_gap=transform.draft_gap)
        expected = literal_torchvision(data, box, 64, flip)
        errors.append(got.permute(1, 2, 0).numpy().astype(np.float64) - expected)
    error = np.stack(errors)
    return float(np.abs(error).mean()), 10 * math.log10(255 ** 2 / max(float((error ** 2).mean()), 1e-12))


@pytest.mark.parametrize("resampler", HERE_RESAMPLERS)
def test_fast_path_crops_stay_close_to_torchvisions(resampler: str) -> None:
    mad, db = fidelity(resampler)
    most_mad, least_db = FIDELITY[resampler]
    assert mad <= most_mad and db >= least_db, (mad, db)


# ---------------------------------------------------------------- reused batch buffers


def test_a_batch_buffer_is_reused_only_once_released(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker side and the training side of one buffer, in one process."""
    import pickle
    from io import BytesIO
    from multiprocessing.reduction import ForkingPickler

    from torch.multiprocessing import reductions

    from packer.read import batching

    monkeypatch.setattr(batching, "get_worker_info", lambda: object())  # as inside a worker
    monkeypatch.setattr(batching, "_pools", {})

    def send(images: torch.Tensor) -> torch.Tensor:
        buffer = BytesIO()
        ForkingPickler(buffer, 2).dump(images)
        # What the training process unpickles: its own mapping of the memory, as another
        # process has (within one process torch would hand back the very same storage).
        reductions.shared_cache.clear()
        return pickle.loads(buffer.getvalue())

    first = batching.new_batch_tensor((2, 3, 4, 4))
    first.fill_(7)
    slot = first._slot
    received = send(first)
    assert type(received) is torch.Tensor
    assert torch.equal(received, torch.full((2, 3, 4, 4), 7, dtype=torch.uint8))
    del first
    view = received[1]
    del received
    # Held (a view keeps the memory): the next batch gets another buffer.
    second = batching.new_batch_tensor((2, 3, 4, 4))
    assert second._slot != slot
    del view
    import gc

    gc.collect()
    third = batching.new_batch_tensor((1, 3, 4, 4))  # smaller: fits the released buffer
    assert third._slot == slot
    # Every buffer held: a fresh, unpooled tensor; reuse off: never pooled.
    held = [send(batching.new_batch_tensor((2, 3, 4, 4))) for _ in range(batching.POOL_SIZE)]
    assert not isinstance(batching.new_batch_tensor((2, 3, 4, 4)), batching._PooledImages)
    del held
    batching.reuse_batch_memory(False)
    try:
        assert not isinstance(batching.new_batch_tensor((2, 3, 4, 4)), batching._PooledImages)
    finally:
        batching.reuse_batch_memory(True)


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_held_batches_never_change_while_workers_reuse_buffers(tmp_path: Path, start_method: str) -> None:
    spec = {f"c{k % 3}/{k:02d}.jpg": jpeg(photo(64 + k, 48 + k, k)) for k in range(40)}
    src = write_tree(tmp_path / "src", spec)
    dst = tmp_path / "dst"
    packer.convert(src, dst, to="lmdb")
    dataset = packer.open_dataset(dst, transform=CenterCropResize(32, 40), decode=False)
    expected = [images.clone() for images, _ in DataLoader(dataset, batch_size=4, num_workers=0)]
    loader = DataLoader(dataset, batch_size=4, num_workers=2, multiprocessing_context=start_method,
                        persistent_workers=True, prefetch_factor=2)
    for _ in range(2):  # dropped as they come: the workers reuse their buffers
        assert all(torch.equal(images, want) for (images, _), want in zip(loader, expected, strict=True))
    kept = [images for images, _ in loader]  # all held at once: reuse must wait
    kept += [images for images, _ in loader]
    assert all(torch.equal(images, want) for images, want in zip(kept, expected * 2, strict=True))


def test_read_only_pixels_raise_no_torch_warning_in_the_resampler() -> None:
    """torch warns about tensors over read-only arrays (pixels records are read in place);
    packer's filter for it must name the module the warning comes from (it moved in 0.2)."""
    pytest.importorskip("cv2")
    code = textwrap.dedent("""
        import numpy as np
        from packer.read import resampling
        crop = np.zeros((64, 48, 3), np.uint8)
        crop.flags.writeable = False
        resampling._opencv_into(crop, np.empty((3, 16, 16), np.uint8), False)
        print("done")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
    assert "not writable" not in done.stderr, done.stderr
