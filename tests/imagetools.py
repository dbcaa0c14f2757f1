"""Small generated images and trees for the test suite (no binary fixtures, no torchvision).

Everything here is importable by DataLoader workers started with ``spawn`` or ``forkserver``
(it imports numpy, PIL and hashlib only; torch lazily), so collate functions and transforms
that must pickle by reference live here rather than in a test module.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image


@dataclass(frozen=True)
class Symlink:
    """A tree entry that is a symbolic link to ``target`` (written verbatim, may be relative)."""

    target: str


@dataclass(frozen=True)
class Dir:
    """A tree entry that is an (empty) directory."""


Entry = bytes | Symlink | Dir


def write_tree(root: str | os.PathLike[str], spec: Mapping[str, Entry]) -> Path:
    """Create ``spec`` (relative POSIX path -> bytes, :class:`Symlink` or :class:`Dir`) under ``root``.

    Entries are created in the given order, so a symlink may point at a directory listed earlier
    or later (dangling links are fine).
    """
    top = Path(root)
    top.mkdir(parents=True, exist_ok=True)
    for rel, entry in spec.items():
        path = top.joinpath(*rel.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(entry, Symlink):
            os.symlink(entry.target, path)
        elif isinstance(entry, Dir):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.write_bytes(entry)
    return top


def pixels(width: int, height: int, seed: int, channels: int = 3) -> np.ndarray:
    """Deterministic smooth-ish uint8 pixels (compress and survive JPEG reasonably)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = [(x * (3 + c) + y * (5 + seed % 7) + 40 * c + seed) % 256 for c in range(channels)]
    arr = np.stack(base, axis=-1).astype(np.int32)
    arr += rng.integers(-8, 9, size=arr.shape)
    arr = np.clip(arr, 0, 255).astype(np.uint8)
    return arr if channels > 1 else arr[..., 0]


def photo(width: int, height: int, seed: int = 0) -> Image.Image:
    """A smooth photo-like RGB image: a few low-frequency waves, edges and mild noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    channels = []
    for c in range(3):
        value = 128 + 40 * np.sin(x / (17 + 5 * c) + seed) * np.cos(y / (23 + 3 * c))
        value += 30 * np.sin((x + 2 * y) / 41 + c) + 25 * ((x // 64 + y // 48) % 2)
        channels.append(value + rng.normal(0, 3, size=x.shape))
    return Image.fromarray(np.clip(np.stack(channels, -1), 0, 255).astype(np.uint8), "RGB")


def encode(image: Image.Image, fmt: str, **params: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def rgb_image(width: int = 16, height: int = 12, seed: int = 0) -> Image.Image:
    return Image.fromarray(pixels(width, height, seed), "RGB")


def jpeg_bytes(width: int = 16, height: int = 12, seed: int = 0, quality: int = 90) -> bytes:
    return encode(rgb_image(width, height, seed), "JPEG", quality=quality)


def png_bytes(width: int = 16, height: int = 12, seed: int = 0) -> bytes:
    return encode(rgb_image(width, height, seed), "PNG")


def image_bytes(ext: str, width: int = 16, height: int = 12, seed: int = 0) -> bytes:
    """A small valid RGB image in the format its extension names."""
    fmt = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG", ".bmp": "BMP", ".ppm": "PPM",
           ".tif": "TIFF", ".tiff": "TIFF", ".webp": "WEBP"}[ext.lower()]
    params: dict[str, object] = {"quality": 90} if fmt == "JPEG" else {}
    if fmt == "WEBP":
        params = {"lossless": True}
    return encode(rgb_image(width, height, seed), fmt, **params)


# ---------------------------------------------------------------- a standard tree


def standard_spec() -> dict[str, Entry]:
    """A small valid tree: 4 classes (space, unicode), nested folders, mixed formats, 14 images."""
    spec: dict[str, Entry] = {}
    files = [
        "cat/001.jpg", "cat/002.png", "cat/sub/003.jpg", "cat/sub/deeper/004.bmp",
        "dog/a.JPG", "dog/b.Png", "dog/c.jpeg", "dog/notes.txt",
        "zebra fish/ünï cödé.jpg", "zebra fish/with space.png", "zebra fish/x/y z.webp",
        "éclair/1.png", "éclair/10.png", "éclair/2.png",
    ]
    for seed, rel in enumerate(files):
        ext = os.path.splitext(rel)[1]
        if ext == ".txt":
            spec[rel] = b"not an image\n"
        else:
            spec[rel] = image_bytes(ext, 8 + seed % 5, 8 + (seed * 3) % 7, seed)
    spec["dog/d.jpg"] = image_bytes(".jpg", 9, 9, 99)
    return spec


STANDARD_IMAGES = 14  # images in standard_spec() (notes.txt is not one)


# ---------------------------------------------------------------- the odd-image zoo


def mixed_tree(root: str | os.PathLike[str], count: int = 36, *, broken: bool = True) -> Path:
    """A small tree of ``count`` JPEGs and PNGs of varied sizes in 3 classes (plus one file
    that is not a JPEG, unless ``broken=False``): a dozen shards at ``shard_size="1500"``."""
    spec: dict[str, Entry] = {}
    for i in range(count):
        cls = ("ant", "bee", "cow")[i % 3]
        make = jpeg_bytes if i % 4 else png_bytes
        spec[f"{cls}/{i:03d}.{'jpg' if i % 4 else 'png'}"] = make(12 + i % 5, 10 + i % 7, i)
    if broken:
        spec["bee/broken.jpg"] = b"\xff\xd8\xff\xe0 not really a jpeg"
    return write_tree(root, spec)


def dataset_snapshot(root: str | os.PathLike[str]) -> dict[str, object]:
    """Every file of a finished dataset by relative path, and its manifest without
    ``created_at``, ``version`` and ``last_update``: equal snapshots are the same dataset,
    however it was written (a conversion, or an update of another version). Kept manifests of
    versions are left out (each holds its own ``created_at``), after checking that the
    current one is ``index.json``."""
    top = Path(root)
    manifest = json.loads((top / "index.json").read_text())
    kept = top / "versions" / f"{manifest['version']:05d}.json"
    assert kept.read_text() == (top / "index.json").read_text()
    files = {str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*"))
             if p.is_file() and p.name not in ("index.json", ".packer-lock") and p.parent.name != "versions"}
    for volatile in ("created_at", "version", "last_update"):
        manifest.pop(volatile)
    return {"files": files, "manifest": manifest}


def grayscale_jpeg() -> bytes:
    return encode(Image.fromarray(pixels(20, 14, 11, channels=1), "L"), "JPEG", quality=92)


def grayscale_png() -> bytes:
    return encode(Image.fromarray(pixels(9, 21, 12, channels=1), "L"), "PNG")


def cmyk_jpeg() -> bytes:
    return encode(Image.fromarray(pixels(18, 10, 13, channels=4), "CMYK"), "JPEG", quality=90)


def rgba_png() -> bytes:
    return encode(Image.fromarray(pixels(15, 11, 14, channels=4), "RGBA"), "PNG")


def palette_png_with_transparency() -> bytes:
    image = rgb_image(17, 13, 15).quantize(colors=16)
    return encode(image, "PNG", transparency=3)


def exif_rotated_jpeg(width: int = 24, height: int = 16) -> bytes:
    """A ``width x height`` JPEG whose EXIF says orientation 6 (rotate 90 degrees clockwise)."""
    exif = Image.Exif()
    exif[0x0112] = 6
    return encode(rgb_image(width, height, 16), "JPEG", quality=90, exif=exif.tobytes())


def png16() -> bytes:
    """A 16-bit grayscale PNG (mode ``I;16``)."""
    arr = (pixels(12, 9, 17, channels=1).astype(np.uint16) * 257).astype(np.uint16)
    return encode(Image.fromarray(arr), "PNG")


def zoo() -> dict[str, bytes]:
    """File name -> bytes for every odd but valid kind of image conversion must pack."""
    return {
        "gray.jpg": grayscale_jpeg(),
        "gray.png": grayscale_png(),
        "cmyk.jpg": cmyk_jpeg(),
        "rgba.png": rgba_png(),
        "palette_trns.png": palette_png_with_transparency(),
        "exif6.jpg": exif_rotated_jpeg(),
        "png_named.jpg": png_bytes(13, 7, 18),
        "deep16.png": png16(),
        "plain.bmp": image_bytes(".bmp", 8, 8, 19),
        "UPPER.JPEG": image_bytes(".jpeg", 10, 6, 20),
        "tiny.webp": image_bytes(".webp", 8, 9, 21),
        "tiny.tif": image_bytes(".tif", 7, 5, 22),
    }


# ---------------------------------------------------------------- broken files


def truncated_jpeg() -> bytes:
    data = jpeg_bytes(32, 32, 30)
    return data[: len(data) // 2]


def truncated_png() -> bytes:
    data = png_bytes(32, 32, 31)
    return data[: int(len(data) * 0.66)]


def corrupt_png() -> bytes:
    """A PNG with one byte inside the IDAT payload flipped: the header is fine, decoding fails."""
    data = bytearray(png_bytes(32, 32, 32))
    idat = data.index(b"IDAT")
    (length,) = struct.unpack(">I", data[idat - 4: idat])
    data[idat + 4 + min(20, length // 2)] ^= 0xFF
    return bytes(data)


def html_as_jpeg() -> bytes:
    return b"<!DOCTYPE html><html><body>404 Not Found</body></html>\n"


# ---------------------------------------------------------------- helpers for assertions


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def rgb_of(path: str | os.PathLike[str]) -> np.ndarray:
    """torchvision's ``pil_loader``: ``Image.open(f).convert("RGB")`` as an array."""
    with open(path, "rb") as handle:
        return np.asarray(Image.open(handle).convert("RGB"))


def tree_files(root: str | os.PathLike[str]) -> dict[str, tuple[int, str]]:
    """Relative path -> (size, sha256) of every regular file under ``root`` (no link following)."""
    out: dict[str, tuple[int, str]] = {}
    top = Path(root)
    for dirpath, _, fnames in os.walk(top):
        for fname in fnames:
            path = Path(dirpath, fname)
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            out[path.relative_to(top).as_posix()] = (len(data), sha(data))
    return out


def crc_ok(png: bytes) -> bool:
    """Whether every chunk CRC of ``png`` is right (used to show a corruption is real)."""
    pos = 8
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos: pos + 4])
        body = png[pos + 4: pos + 8 + length]
        (crc,) = struct.unpack(">I", png[pos + 8 + length: pos + 12 + length])
        if zlib.crc32(body) != crc:
            return False
        pos += 12 + length
    return True


# ---------------------------------------------------------------- file modes that bind for root

#: Python source to run first in a ``python -c`` child: as root, it drops ``CAP_DAC_OVERRIDE``
#: and ``CAP_DAC_READ_SEARCH`` so file modes bind (root stays the owner of ``tmp_path``, so
#: nothing else changes), then proves it by failing to open ``$PACKER_TEST_PROBE`` (a path
#: the test made unreadable or unwritable). If either step is impossible it prints ``SKIP: ...``
#: and exits 0, and the test skips with that reason.
DROP_DAC_PRELUDE = """
import ctypes, os, sys
if os.geteuid() == 0:
    libc = ctypes.CDLL(None, use_errno=True)
    class _Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
    class _Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]
    _header, _data = _Header(0x20080522, 0), (_Data * 2)()
    if libc.capget(ctypes.byref(_header), _data) != 0:
        print("SKIP: capget failed"); sys.exit(0)
    _keep = ~((1 << 1) | (1 << 2)) & 0xFFFFFFFF  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
    _data[0].effective &= _keep; _data[0].permitted &= _keep; _data[0].inheritable &= _keep
    if libc.capset(ctypes.byref(_header), _data) != 0:
        print("SKIP: capset failed"); sys.exit(0)
_probe = os.environ["PACKER_TEST_PROBE"]
try:
    if os.path.isdir(_probe):
        open(os.path.join(_probe, ".probe"), "wb").close()
    else:
        open(_probe, "rb").close()
except PermissionError:
    pass
else:
    print("SKIP: file modes do not bind even without DAC override"); sys.exit(0)
"""


# ---------------------------------------------------------------- picklable worker-side callables


class PixelDigest:
    """Transform: a decoded image (or stored bytes) -> sha256 of its pixels (or bytes)."""

    def __call__(self, sample: object) -> str:
        if isinstance(sample, bytes):
            return sha(sample)
        assert isinstance(sample, Image.Image)
        return sha(sample.mode.encode() + repr(sample.size).encode() + sample.tobytes())


class ToTensor:
    """Transform: a PIL image -> ``uint8`` CHW torch tensor (a stand-in for torchvision's)."""

    def __call__(self, image: Image.Image) -> object:
        import torch

        return torch.from_numpy(np.array(image, dtype=np.uint8, copy=True)).permute(2, 0, 1)


def digest_collate(batch: list[tuple[object, int]]) -> list[tuple[str, int]]:
    """collate_fn: keep each sample's digest (bytes are hashed) and its target."""
    return [(sample if isinstance(sample, str) else sha(sample), int(target))  # type: ignore[arg-type]
            for sample, target in batch]


def tensor_collate(batch: list[tuple[object, int]]) -> tuple[object, object]:
    """collate_fn: stack same-sized uint8 tensors and the targets (something to pin)."""
    import torch

    images = torch.stack([sample for sample, _ in batch])  # type: ignore[misc]
    return images, torch.tensor([int(t) for _, t in batch], dtype=torch.int64)


def pid_digest_collate(batch: list[tuple[object, int]]) -> tuple[int, list[tuple[str, int]]]:
    """collate_fn: :func:`digest_collate` plus the id of the process that built the batch."""
    return os.getpid(), digest_collate(batch)
