"""Small generated image trees for the contract suites: nothing binary is checked in.

Images are seeded noise (so no two are alike and none compresses away), a few dozen pixels a
side, as JPEG and PNG; a tree has three classes and, unless asked otherwise, one file that
only looks like a JPEG, which every conversion must skip as ``truncated``.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

__all__ = ["BROKEN", "BROKEN_BYTES", "ImageTree", "edit_tree", "encoded", "image_tree", "noise"]

#: The relative path of the file in an :func:`image_tree` that cannot be packed.
BROKEN = "bee/broken.jpg"
#: Its bytes: a JPEG signature and nothing a decoder can use.
BROKEN_BYTES = b"\xff\xd8\xff\xe0 not really a jpeg"

_CLASSES = ("ant", "bee", "cow")


def noise(width: int, height: int, seed: int, mode: str = "RGB") -> Image.Image:
    """A ``width`` x ``height`` image of seeded noise in ``mode`` (``RGB``, ``L`` or ``RGBA``)."""
    channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(height, width, channels), dtype=np.uint8)
    return Image.fromarray(pixels[:, :, 0] if channels == 1 else pixels, mode)


def encoded(image: Image.Image, fmt: str) -> bytes:
    """``image`` encoded as ``fmt`` (``JPEG``, ``PNG``, ...), deterministically."""
    buffer = io.BytesIO()
    image.save(buffer, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buffer.getvalue()


@dataclass(frozen=True)
class ImageTree:
    """A generated ImageFolder tree: its root, classes and what a conversion must give.

    ``files`` are every file as ``(relative path, class index)`` in torchvision's ImageFolder
    order; ``samples`` the packable ones, what a conversion must give; ``broken`` the relative
    paths that must be skipped.
    """

    root: Path
    classes: tuple[str, ...]
    files: tuple[tuple[str, int], ...]
    broken: tuple[str, ...]

    @property
    def samples(self) -> tuple[tuple[str, int], ...]:
        """The packable files, in order."""
        return tuple(file for file in self.files if file[0] not in self.broken)

    def read(self, relpath: str) -> bytes:
        """The bytes of the file at ``relpath``."""
        return (self.root / relpath).read_bytes()


def _write(root: Path, files: Mapping[str, bytes]) -> None:
    for relpath, data in files.items():
        path = root.joinpath(*relpath.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _scanned(root: Path, broken: tuple[str, ...]) -> ImageTree:
    """The tree's samples in torchvision's ``ImageFolder`` order: ``sorted(os.walk(...))``."""
    classes = tuple(sorted(entry.name for entry in root.iterdir() if entry.is_dir()))
    found: list[tuple[str, int]] = []
    for label, name in enumerate(classes):
        for dirpath, _, files in sorted(os.walk(root / name)):
            found.extend((Path(dirpath, file).relative_to(root).as_posix(), label) for file in sorted(files))
    return ImageTree(root, classes, tuple(found), broken)


def image_tree(root: str | os.PathLike[str], count: int = 12, *, broken: bool = True,
               nested: bool = False) -> ImageTree:
    """Write ``count`` JPEGs and PNGs of varied sizes in three classes under ``root``.

    With ``broken`` the tree also holds :data:`BROKEN`; with ``nested`` a third of the images
    of the last class lie in a subfolder, and names have spaces and non-ASCII letters. At
    ``shard_size="1500"`` a dozen images make about eight shards, so conversions run several
    tasks on every engine.
    """
    top = Path(root)
    files: dict[str, bytes] = {}
    for i in range(count):
        fmt, suffix = ("JPEG", "jpg") if i % 4 else ("PNG", "png")
        folder = _CLASSES[i % 3] + ("/sub dir" if nested and i % 3 == 2 and i % 2 else "")
        name = f"{'é' if nested and i % 5 == 1 else ''}{i:03d}"
        files[f"{folder}/{name}.{suffix}"] = encoded(noise(12 + i % 5, 10 + i % 7, i), fmt)
    if broken:
        files[BROKEN] = BROKEN_BYTES
    _write(top, files)
    return _scanned(top, (BROKEN,) if broken else ())


def edit_tree(tree: ImageTree) -> ImageTree:
    """Edit ``tree`` in place as a user would between versions: two files added to one class,
    one removed from another, one rewritten with other pixels; return the tree as it is now."""
    files = {f"{_CLASSES[1]}/new{i}.jpg": encoded(noise(20, 17, 900 + i), "JPEG") for i in range(2)}
    changed = next(relpath for relpath, _ in tree.samples if relpath.endswith(".jpg"))
    files[changed] = encoded(noise(30, 20, 777), "JPEG")
    _write(tree.root, files)
    removed = next(relpath for relpath, label in tree.samples if label == 2)
    (tree.root / removed).unlink()
    return _scanned(tree.root, tree.broken)
