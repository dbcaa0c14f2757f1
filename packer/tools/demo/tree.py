"""The demo's input: a small photo-like ImageFolder tree with a few broken files, from a seed.

Smooth colour fields with class-specific shapes, blur and sensor noise, JPEG and PNG, mixed
sizes, one grayscale image per class, some in a nested folder; the same seed always gives the
same bytes.
"""

from __future__ import annotations

import os
import random

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

__all__ = ["BROKEN_FILES", "make_demo_tree"]

_CLASSES = ("circles", "stripes", "squares", "triangles")
BROKEN_FILES = {
    "circles/broken_truncated.jpg": "truncated",
    "stripes/empty.jpg": "empty_file",
    "squares/notes.jpg": "not_an_image",
}


def _photo(rng: random.Random, kind: str, size: tuple[int, int]) -> Image.Image:
    """A photo-like picture: a smooth colour field with class-specific shapes, blur and noise."""
    width, height = size
    field_ = np.array([[rng.randrange(256) for _ in range(3)] for _ in range(16)], dtype=np.uint8)
    image = Image.fromarray(field_.reshape(4, 4, 3)).resize(size, Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(image)
    for _ in range(rng.randint(3, 7)):
        colour = tuple(rng.randrange(256) for _ in range(3))
        x, y = rng.randrange(width), rng.randrange(height)
        r = rng.randint(min(size) // 10, min(size) // 3)
        if kind == "circles":
            draw.ellipse((x - r, y - r, x + r, y + r), fill=colour)
        elif kind == "stripes":
            draw.line((0, y, width, y + rng.randint(-r, r)), fill=colour, width=max(2, r // 3))
        elif kind == "squares":
            draw.rectangle((x - r, y - r, x + r, y + r), fill=colour)
        else:
            draw.polygon(((x, y - r), (x - r, y + r), (x + r, y + r)), fill=colour)
    image = image.filter(ImageFilter.GaussianBlur(rng.uniform(0.5, 1.5)))
    noise = np.random.default_rng(rng.randrange(2**32)).normal(0, 4, (height, width, 3))
    pixels = np.clip(np.asarray(image, dtype=np.float32) + noise, 0, 255).astype(np.uint8)
    return Image.fromarray(pixels)


def make_demo_tree(root: str, *, per_class: int = 75, seed: int = 0) -> list[str]:
    """Write a small photo-like ImageFolder tree under ``root``; return the broken files' paths.

    Four classes of ``per_class`` images, 160-480 px a side, mostly JPEG (quality 85-95), every
    tenth a PNG, one grayscale per class, some in a nested folder; plus one truncated JPEG, one
    empty file and one text file named ``.jpg``. The same seed always gives the same bytes.
    """
    rng = random.Random(seed)
    for kind in _CLASSES:
        os.makedirs(os.path.join(root, kind, "more"), exist_ok=True)
        for number in range(per_class):
            size = (rng.randint(160, 480), rng.randint(160, 480))
            image = _photo(rng, kind, size)
            if number == 0:
                image = image.convert("L")
            folder = os.path.join(root, kind, "more" if number % 7 == 3 else "")
            if number % 10 == 9:
                image.save(os.path.join(folder, f"{kind}_{number:04d}.png"))
            else:
                image.save(os.path.join(folder, f"{kind}_{number:04d}.jpg"),
                           quality=rng.randint(85, 95))
    good = os.path.join(root, "circles", "circles_0001.jpg")
    with open(good, "rb") as handle:
        data = handle.read()
    with open(os.path.join(root, "circles", "broken_truncated.jpg"), "wb") as handle:
        handle.write(data[: len(data) // 2])
    open(os.path.join(root, "stripes", "empty.jpg"), "wb").close()
    with open(os.path.join(root, "squares", "notes.jpg"), "w", encoding="utf-8") as handle:
        handle.write("meeting notes, not a picture\n")
    return sorted(BROKEN_FILES)
